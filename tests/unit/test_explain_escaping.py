"""The relabel debugger's pure half (rwrouter.routing.explain) at destinations that escape
names: the labels sent, what escaping changed, collisions between the series explained."""

from __future__ import annotations

from rwrouter.reasons import DropReason
from rwrouter.routing import Route, Router
from rwrouter.routing.escape import UNDERSCORES
from rwrouter.routing.explain import DROPPED, SENT, explain

OTEL = (("__name__", "http.server.duration"), ("job", "x"), ("service.name", "api"))
ESCAPED = (("__name__", "http_server_duration"), ("job", "x"), ("service_name", "api"))


def router() -> Router:
    return Router(global_rules=(), routes=[Route("ws", escaping=UNDERSCORES), Route("self")])


def test_explain_shows_escaped_labels_and_collisions_between_series_explained() -> None:
    r = router()
    first = explain(OTEL, (), r.routes, router=r)
    ws, other = first.decisions
    assert ws.outcome == SENT and ws.labels == ESCAPED
    assert ws.before == OTEL and ws.escaping == UNDERSCORES
    assert ws.escape_note == (
        "escaped (underscores): metric name http.server.duration -> "
        "http_server_duration; label service.name -> service_name"
    )
    assert other.labels == OTEL and other.escape_note == ""
    twin = explain(ESCAPED, (), r.routes, router=r)
    assert twin.decisions[0].outcome == DROPPED
    assert twin.decisions[0].reason == DropReason.NAME_COLLISION
    assert "name collision" in twin.decisions[0].detail
    alone = explain(ESCAPED, (), r.routes)  # a fresh router: no history
    assert alone.decisions[0].outcome == SENT


def test_explain_shows_a_label_collision() -> None:
    labels = (("__name__", "up"), ("a.b", "dot"), ("a_b", "underscore"))
    [ws, _] = explain(labels, (), router().routes).decisions
    assert ws.labels == (("__name__", "up"), ("a_b", "dot"))
    assert ws.escape_note == (
        "escaped (underscores): label a.b -> a_b; label a_b dropped "
        "(its escaped name is a.b's too; a.b sorts first)"
    )
