"""Workers that run servers on corun where the server picks the loop itself.

gunicorn starts uvicorn's worker (``uvicorn-worker``), which builds its
loop from a class attribute, ``"auto"``: uvloop when it is installed, else
asyncio's. This worker asks for corun's instead::

    gunicorn app:app -k corun.servers.UvicornWorker

It needs ``uvicorn-worker`` (``pip install uvicorn-worker``). For each
server's recipe, see docs/servers.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

from uvicorn_worker import UvicornWorker as _UvicornWorker  # type: ignore[import-untyped]


class UvicornWorker(_UvicornWorker):  # type: ignore[misc]
    """uvicorn's gunicorn worker, on corun's loop (uvicorn's ``--loop corun:new_event_loop``)."""

    CONFIG_KWARGS: ClassVar[dict[str, Any]] = {"loop": "corun:new_event_loop", "http": "auto"}
