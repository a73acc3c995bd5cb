"""Django's PostgreSQL backend with Loop's pool rule: a thread that waits for a pooled connection
past LOOP_DB_POOL_TIMEOUT fails saying why (loopsite.database.PoolExhausted), never hangs."""
