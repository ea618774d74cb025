"""Write clients for tests: :class:`rwrouter.send.transport.WriteClient` without sockets.

The deliverer and the destination depend on the protocol only; tests give them these instead
of the aiohttp :class:`~rwrouter.send.transport.Transport`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rwrouter.send.transport import Answer

URL = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write"

Reply = Callable[[bytes, Mapping[str, str]], Answer]  # (body as sent, headers) -> the answer


def ok(_body: bytes, _headers: Mapping[str, str]) -> Answer:
    """A 200 with no headers and an empty body."""
    return Answer(200, {}, b"")


class FakeClient:
    """Answers every POST with ``reply(body, headers)`` (which may raise
    :class:`~rwrouter.errors.TransportError`: no answer) and keeps what was
    posted: ``posts``, (body as sent, headers) in order. ``starts``/``closes`` count the
    lifecycle calls. Tests with a richer destination subclass it and override :meth:`post`.
    """

    def __init__(self, reply: Reply = ok, *, url: str = URL) -> None:
        self._url = url
        self._answer = reply
        self.posts: list[tuple[bytes, dict[str, str]]] = []
        self.starts = self.closes = 0

    @property
    def url(self) -> str:
        return self._url

    async def start(self) -> None:
        self.starts += 1

    async def post(self, body: bytes, headers: Mapping[str, str]) -> Answer:
        self.posts.append((body, dict(headers)))
        return self._answer(body, headers)

    async def close(self) -> None:
        self.closes += 1
