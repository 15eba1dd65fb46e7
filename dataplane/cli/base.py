"""What every ``meridian`` command shares: the connection options, error reporting, output.

A command raises ``MeridianError`` for anything the platform refuses (the SDK's typed
errors, and the CLI's own checks of its input); ``reporting`` turns it into one line on
stderr, ``error: CODE: message``, and exit code 1, without a traceback. A refusal of the
control plane's REST API (``ApiError``) is printed the same way, followed by one line per
field message of the API (``  field: message``). Bad usage (unknown option, malformed
value) is typer's exit code 2.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn, ParamSpec, TypeVar

import grpc
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dataplane.cli.api import DEFAULT_API_URL, Api, ApiError
from dataplane.client.auth import ClientCredentials, StaticToken, TokenSource
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc

# The options every REST-backed command group takes.
TenantOption = Annotated[
    str | None,
    typer.Option("--tenant", "-t", help="The tenant (default: your only tenant)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
EXIT_ERROR = 1
PIPE_WIDTH = 1000

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Settings:
    """Global options, kept on the typer context: where the brokers are, and how to
    reach them (``credentials``: a token or a client-credentials source; ``tls``: a CA
    file, or None for plaintext); ``api_url``: the control plane's REST API, which the
    same credentials reach."""

    bootstrap: str
    credentials: TokenSource | None = None
    tls: str | None = None
    api_url: str = DEFAULT_API_URL

    @property
    def api(self) -> Api:
        return Api(self.api_url, self.credentials)

    @property
    def connect(self) -> dict[str, Any]:
        """The SDK's connection keywords (``credentials``, ``tls``)."""
        return {"credentials": self.credentials, "tls": self.tls}


def credentials_from(
    token: str | None, token_url: str | None, client_id: str | None, client_secret: str | None
) -> TokenSource | None:
    """``--token``, or ``--token-url`` with ``--client-id`` and ``--client-secret``."""
    if token and token_url:
        raise invalid("give --token or --token-url, not both", ErrorCode.INVALID_CONFIG)
    if token:
        return StaticToken(token)
    if token_url or client_id or client_secret:
        if not (token_url and client_id and client_secret):
            raise invalid(
                "--token-url needs --client-id and --client-secret", ErrorCode.INVALID_CONFIG
            )
        return ClientCredentials(token_url, client_id, client_secret)
    return None


def settings(ctx: typer.Context) -> Settings:
    root = ctx.find_root()
    if not isinstance(root.obj, Settings):
        root.obj = Settings(DEFAULT_BOOTSTRAP)
    return root.obj


def _console(stream: Any) -> Console:
    """A console that prints strings as they are: names, patterns and reasons come from
    users and servers, so Rich markup (``[a-z]``, ``[/]``) and emoji codes (``:x:``)
    are never interpreted. Off a terminal (pipes, files, tests) nothing is cut to a
    guessed width of 80."""
    width = None if stream.isatty() else PIPE_WIDTH
    return Console(
        file=stream, highlight=False, markup=False, emoji=False, soft_wrap=True, width=width
    )


def stderr() -> Console:
    """A console on the current stderr (typer's test runner swaps the stream per call)."""
    return _console(sys.stderr)


def stdout() -> Console:
    return _console(sys.stdout)


def reporting(command: Callable[P, R]) -> Callable[P, R]:
    """Wraps a command so a typed failure ends it with ``error: CODE: message`` (and the
    API's field messages), exit 1."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except MeridianError as exc:
            fail(exc)
        except grpc.RpcError as exc:
            fail(error_from_rpc(exc))
        except ApiError as exc:
            print("\n".join(exc.lines()), file=sys.stderr)
            raise typer.Exit(EXIT_ERROR) from None
        except BrokenPipeError:
            # the reader of our output went away (``| head``): it has what it wanted.
            # Point stdout at /dev/null so the interpreter's final flush cannot fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None

    return run


def fail(exc: MeridianError) -> NoReturn:
    print(f"error: {exc.code_name}: {exc.message}", file=sys.stderr)
    raise typer.Exit(EXIT_ERROR)


def invalid(message: str, code: int = ErrorCode.INVALID_REQUEST) -> MeridianError:
    """The CLI's own refusal of its input, typed like the platform's."""
    return MeridianError(code, message)


def parse_pairs(items: Sequence[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` into a dict; raises ``INVALID_CONFIG`` for an item without ``=``."""
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise invalid(f"{what} {item!r} is not of the form key=value", ErrorCode.INVALID_CONFIG)
        pairs[key.strip()] = value.strip()
    return pairs


def table(title: str | None, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A plain table: the first column left-aligned, the others right-aligned. The title
    and every cell are literal text (never Rich markup), whichever console prints it."""
    out = Table(
        title=None if title is None else literal(title),
        title_justify="left", box=None, pad_edge=False, header_style="bold",
    )  # fmt: skip
    for i, header in enumerate(headers):
        out.add_column(header, justify="left" if i == 0 else "right", overflow="fold")
    for row in rows:
        out.add_row(*(literal("-" if cell is None else str(cell)) for cell in row))
    return out


def literal(value: object) -> Text:
    """``value`` as Rich text shown exactly as it is: the one way a user's or a server's
    string (a name, a pattern, a reason) reaches a Rich renderable."""
    return Text(str(value))


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, sort_keys=True) + "\n")
