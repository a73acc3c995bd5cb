"""How Loop's HTTP clients meet the servers it does not control: one client library (httpx2, the
one the MCP SDK speaks) under two policies.

- `bounded`: the model servers, which an operator names (agent/llm/). Redirects are followed only
  within the server's own origin; the key and the conversation never go elsewhere.
- `ssrf`: the MCP and OAuth servers, which a person may name (mcp_servers/). Every connection
  resolves its host and connects only to an address it vetted (public, or on a network the
  operator admits), so no redirect, DNS answer or rebinding reaches the site's own network.

Both ask for nothing compressed and refuse a compressed body (a small gzip body can inflate to
gigabytes), and cap the bytes they read of a body as it comes (`bodies`: `ssrf` every body,
`bounded` a body read whole; the model clients bound a streamed reply line by line). What they
refuse is an exception the request raises; the caller words it for whoever reads it. Both verify
a server's certificate by the same trust roots, loaded once a process (`trust`).
"""
