"""Process runners: the HTTP server, embedded Postgres and the event loop."""
