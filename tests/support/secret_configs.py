"""Configurations whose error (or description) would show a secret if it were printed as
written: one per kind of secret, shared by the tests of every output that shows config errors
(``check-config``'s stderr and stdout, the reload log line, the answer of ``POST /-/reload``).

Each secret is a distinctive string that appears nowhere else in the file, so "the output
does not contain it" is a real check.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SecretCase:
    """``yaml``: a whole configuration file; ``secret``: what must never be printed;
    ``where``: the key path the error names (a bad file), None for a valid one (its
    description must not show the secret)."""

    id: str
    yaml: str
    secret: str
    where: str | None


def _dest(body: str, url: str = "http://127.0.0.1:9/write") -> str:
    return f"remote_write:\n  - name: d\n    url: {url}\n{body}"


BAD_SECRETS = [
    SecretCase(
        "basic_auth_password_integer",
        _dest("    basic_auth: {username: u, password: 20261201}\n"),
        "20261201",
        "remote_write[0].basic_auth.password",
    ),
    SecretCase(
        "authorization_credentials_integer",
        _dest("    authorization: {credentials: 987654321}\n"),
        "987654321",
        "remote_write[0].authorization.credentials",
    ),
    SecretCase(
        "sigv4_secret_key_integer",
        _dest("    sigv4: {region: us-east-1, access_key: AKIDEXAMPLE, secret_key: 55554444}\n"),
        "55554444",
        "remote_write[0].sigv4.secret_key",
    ),
    SecretCase(
        "header_value_integer",
        _dest("    headers: {X-Api-Key: 31415926}\n"),
        "31415926",
        "remote_write[0].headers.X-Api-Key",
    ),
    SecretCase(
        "url_userinfo_port_out_of_range",
        _dest("", url="http://pu:ProxyPassw0rd55@127.0.0.1:192840/write"),
        "ProxyPassw0rd55",
        "remote_write[0].url",
    ),
    SecretCase(
        "url_query_invalid",
        _dest("", url='"http://127.0.0.1:9/write?apikey=QkFEX2FwaWtleQ x"'),
        "QkFEX2FwaWtleQ",
        "remote_write[0].url",
    ),
    SecretCase(
        "proxy_url_userinfo_port_out_of_range",
        _dest("    proxy_url: http://pu:Pr0xyS3cretZ@proxy:99999\n"),
        "Pr0xyS3cretZ",
        "remote_write[0].proxy_url",
    ),
    SecretCase(
        "yaml_syntax_error_on_the_password_line",
        _dest('    basic_auth: {username: u, password: "Unterminated9876\n'),
        "Unterminated9876",
        "",
    ),
    SecretCase(
        "authorization_type_holding_the_token",
        _dest('    authorization: {type: "Bearer t0kenInTyp3", credentials: x}\n'),
        "t0kenInTyp3",
        "remote_write[0].authorization.type",
    ),
    SecretCase(
        "password_with_a_bad_env_reference",
        _dest('    basic_auth: {username: u, password: "${s3cr3t pass}"}\n'),
        "s3cr3t pass",
        "remote_write[0].basic_auth.password",
    ),
    SecretCase(
        "credentials_with_a_line_break",
        _dest('    authorization: {credentials: "CrLfT0ken\\r\\nX-Evil: 1"}\n'),
        "CrLfT0ken",
        "remote_write[0].authorization.credentials",
    ),
]

BAD_SECRETS += [
    SecretCase(
        "basic_auth_written_as_a_string",
        _dest('    basic_auth: "router:Str1ngPassw0rd"\n'),
        "Str1ngPassw0rd",
        "remote_write[0].basic_auth",
    ),
    SecretCase(
        "destination_written_as_a_url_string",
        "remote_write:\n  - http://router:UrlStr1ngPass@127.0.0.1:9/write\n",
        "UrlStr1ngPass",
        "remote_write[0]",
    ),
]

GOOD_SECRETS = [
    SecretCase(
        "url_query_value",
        _dest("", url="http://127.0.0.1:9/write?apikey=G00dQu3ryK3y"),
        "G00dQu3ryK3y",
        None,
    ),
    SecretCase(
        "proxy_url_userinfo",
        _dest("    proxy_url: http://pu:G00dPr0xyPass@proxy:3128\n"),
        "G00dPr0xyPass",
        None,
    ),
    SecretCase(
        "inline_password",
        _dest("    basic_auth: {username: u, password: G00dPassw0rd}\n"),
        "G00dPassw0rd",
        None,
    ),
    SecretCase(
        "header_value",
        _dest("    headers: {X-Api-Key: G00dH3aderVal}\n"),
        "G00dH3aderVal",
        None,
    ),
]
