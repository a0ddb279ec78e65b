"""The face warden shows hosts: serves either era, forwards and translates, routes server->client requests."""
