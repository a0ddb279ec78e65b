"""The face warden shows hosts: serves either era, forwards and translates, routes server->client requests.

One module a job: ``core`` (the :class:`~warden.gateway.core.Gateway` in front of one server: its routing tables
and the call path), ``lists``, ``listen``, ``questions``, ``exchanges`` and ``task_routing`` (the gateway's parts),
``guard`` (policy, pins and consent at its decision points), ``recorder`` (its audit records), ``shaping``,
``tasks`` and ``mrtr`` (pure rules for eras, tasks and multi-round requests), ``link`` (one host as the gateway
sees it), the faces ``stdio`` and ``http`` (with ``http_access``, ``http_streams``, ``http_token``), ``hub``
(``warden serve``: many gateways behind one face), ``principals`` and ``pinwatch``.
"""

__all__: list[str] = []  # nothing is re-exported here: import the module that does the job
