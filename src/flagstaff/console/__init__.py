"""The web console: pages rendered on the server from the management API's plain data, and
a small script that sends forms to the documented management API with the session cookie and
the CSRF header."""
