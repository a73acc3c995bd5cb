"""Which model each page of the operators' console shows: every registration in one place. The
pages themselves are in console/runs.py, console/tool_executions.py, console/approvals.py,
console/memories.py, console/mcp_servers.py, console/quotas.py and console/assistants.py; people
and sign-ups are accounts/admin.py."""

from django.contrib import admin

from accounting.models import Charge, Price, Quota
from agent.models import AgentRun, BreakerTrip, RunEvent, ToolExecution
from approvals.models import ApprovalRequest, SiteToolPolicy, ToolGrant
from assistants.models import Assistant
from console.approvals import ApprovalRequestAdmin, SiteToolPolicyAdmin, ToolGrantAdmin
from console.assistants import AssistantAdmin
from console.mcp_servers import McpConnectionAdmin, McpServerAdmin, McpToolAdmin
from console.memories import ForgottenMemoryAdmin, MemoryAdmin
from console.notifications import DeliveryAdmin, EndpointAdmin  # noqa: F401 (they register)
from console.prices import ChargeAdmin, PriceAdmin
from console.quotas import QuotaAdmin
from console.runs import AgentRunAdmin, BreakerTripAdmin, RunEventAdmin
from console.tool_executions import ToolExecutionAdmin
from mcp_servers.models import McpConnection, McpServer, McpTool
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
admin.site.register(McpServer, McpServerAdmin)
admin.site.register(McpTool, McpToolAdmin)
admin.site.register(McpConnection, McpConnectionAdmin)
admin.site.register(Price, PriceAdmin)
admin.site.register(Charge, ChargeAdmin)
admin.site.register(Quota, QuotaAdmin)
admin.site.register(Assistant, AssistantAdmin)
