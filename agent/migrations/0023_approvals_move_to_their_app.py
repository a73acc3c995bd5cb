# The records of calls that wait for a person's decision move to the approvals app, which owns
# them with the rest of approvals (approvals/migrations/0001_initial.py takes them up). Only the
# migration state changes here: the tables keep their names (agent_approvalrequest, ...) and
# their rows, nothing is dropped or copied.

from django.db import migrations

MOVED = ("ToolGrant", "ApprovalPreference", "SiteToolPolicy", "ApprovalRequest")


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0022_conversation_pinned_and_archived"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name=name) for name in MOVED],
        ),
    ]
