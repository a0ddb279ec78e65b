"""The face warden shows hosts: serves either era, forwards and translates, routes server->client requests."""

__all__: list[str] = []  # nothing is re-exported here: import the module that does the job
