"""Each person's workspace: its directory and the sandbox uid it belongs to (directory), its quota
(quota), the path rules and the walks that hold at any depth (paths), the confinement every reader
and writer of it goes through (confined), and the Files panel through which its person sees and
changes it (browse, uploads, views, urls, its templates and static files).

It sits below the sandbox and the tools: core -> workspace -> sandbox -> tools -> ...
(tests/test_layers.py). The file tools, the sandbox and its saver all stand on the workspace (its
path rules, its quota, whom its files belong to), while nothing here needs a tool or a sandbox: so
workspace imports nothing of either, and the few things that are theirs are there. The sandbox's
command that starts the quota's saver is sandbox.chain.quota_prefix; the ToolContext for a person
is built by tools.context.context_for; a refusal here is a plain exception (PathRefused,
WorkspaceUnavailable, QuotaExceeded) that tools.files turns into the model's denial or error and
workspace.browse into the person's sentence. The panel's views need only this app and Django, so
they live here too, under the chat, the accounts and the console that link to them.
"""
