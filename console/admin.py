"""Which model each page of the operators' console shows: every registration in one place. The
pages themselves are in console/runs.py, console/tool_executions.py, console/approvals.py and
console/memories.py; people and sign-ups are accounts/admin.py."""

from django.contrib import admin

from agent.models import (
    AgentRun,
    ApprovalRequest,
    BreakerTrip,
    RunEvent,
    SiteToolPolicy,
    ToolExecution,
    ToolGrant,
)
from console.approvals import ApprovalRequestAdmin, SiteToolPolicyAdmin, ToolGrantAdmin
from console.memories import ForgottenMemoryAdmin, MemoryAdmin
from console.runs import AgentRunAdmin, BreakerTripAdmin, RunEventAdmin
from console.tool_executions import ToolExecutionAdmin
from memory.models import ForgottenMemory, Memory

admin.site.register(AgentRun, AgentRunAdmin)
admin.site.register(RunEvent, RunEventAdmin)
admin.site.register(BreakerTrip, BreakerTripAdmin)
admin.site.register(ToolExecution, ToolExecutionAdmin)
admin.site.register(Memory, MemoryAdmin)
admin.site.register(ForgottenMemory, ForgottenMemoryAdmin)
admin.site.register(ApprovalRequest, ApprovalRequestAdmin)
admin.site.register(SiteToolPolicy, SiteToolPolicyAdmin)
admin.site.register(ToolGrant, ToolGrantAdmin)
