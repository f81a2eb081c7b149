"""Every shell command the README and docs/ show (```sh blocks) runs as written.

Each document's commands run in order in one bash session, as a reader would type them, so a
variable set by one (``SAGA=$(...)``) is there for the next:

* a command that runs until stopped (``sagacity dev``, ``sagacity worker``,
  ``sagacity approvals serve``, or any whose comment says "until Ctrl-C") starts in the
  background; the session waits until it says it is ready and stops it (SIGTERM) at the end.
  The export lines ``sagacity dev`` prints are applied, as the reader pastes them;
* a document that starts ``sagacity dev`` runs with nothing configured, like a fresh clone;
  any other runs against the test session's Temporal server and a fresh database;
* a command with a placeholder (``order-1234``, ``<sha256>``, ``[--option …]``) cannot run as
  written: its program, subcommand and every option it uses are checked to exist instead;
* what cannot run here at all is listed in ``SKIPPED`` with the reason, and printed.

Anything else must exit 0 (``set -e -o pipefail``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main

from sagacity.cli.main import app as main_app
from sagacity.devstack import Endpoints
from sagacity.tools import ToolRegistry
from tests.conftest import scratch_database

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"
#: documents whose commands run in a folder of their own, by their own test
RUN_ELSEWHERE = {"your-own-app.md": "tests/docs/test_your_own_app.py, in the app's folder"}
DOCUMENTS = [
    REPO / "README.md",
    *sorted(p for p in (REPO / "docs").glob("*.md") if p.name not in RUN_ELSEWHERE),
]

#: (pattern, why it is not run here)
SKIPPED = [
    (r"^make\b|\bmake test\b", "make wraps commands tested here; `make test` is this very suite"),
    (
        r"^(docker|kubectl)\b",
        "no container engine or cluster here: tests/ops/test_deploy.py validates deploy/",
    ),
    (r"example\.internal", "placeholder host names"),
    (
        r"^curl\b.*\$TOKEN",
        "needs a token of the running approvals API: tests/approvals covers the API",
    ),
    (
        r"(^|\s)(\S*/)?python -m bench\.|(^|\s)bench/",
        "benchmarks run for minutes: bench/ and tests/chaos",
    ),
]
PLACEHOLDER = re.compile(r"order-1234|<[\w-]+>|\[--")
LONG_RUNNING = re.compile(r"(^|/)sagacity (dev|worker|approvals serve)\b")
READY = "worker ready|Press Ctrl-C|Uvicorn running"
ENDPOINT_VARIABLES = (
    "SAGACITY_DATABASE_URL",
    "SAGACITY_OWNER_DATABASE_URL",
    "TEMPORAL_ADDRESS",
    "SAGACITY_TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "SAGACITY_TEMPORAL_NAMESPACE",
)


@dataclass(frozen=True)
class Command:
    document: Path
    line: int
    text: str
    comment: str

    def __str__(self) -> str:
        return f"{self.document.name}:{self.line}: {self.text}"

    @property
    def words(self) -> list[str]:
        words = shlex.split(self.text)
        while words and re.match(r"^\w+=", words[0]):  # leading VAR=value assignments
            words.pop(0)
        return words

    @property
    def long_running(self) -> bool:
        return bool(LONG_RUNNING.search(self.text)) or "until Ctrl-C" in self.comment

    @property
    def skipped(self) -> str | None:
        return next((why for pattern, why in SKIPPED if re.search(pattern, self.text)), None)


def _split_comment(line: str) -> tuple[str, str]:
    """A trailing ``  # comment`` (with no quote after it) apart from the command."""
    found = re.search(r"\s+#\s[^'\"]*$", line)
    return (line[: found.start()], found.group().strip()) if found else (line, "")


def shell_commands(document: Path) -> Iterator[Command]:
    """The commands of the document's ```sh / ```bash blocks; continuation lines joined."""
    fenced = False
    pending: list[str] = []
    start = 0
    for number, line in enumerate(document.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = line.strip() in ("```sh", "```bash") if not fenced else False
            continue
        if not fenced or (not pending and (not line.strip() or line.lstrip().startswith("#"))):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1].rstrip())
            continue
        text, comment = _split_comment(" ".join([*pending, line.strip()]))
        pending = []
        yield Command(document, start, text.strip(), comment)


def _sagacity_options(words: list[str]) -> set[str]:
    # typer vendors its own click: walk the command tree by duck typing
    command: Any = typer.main.get_command(main_app)
    for word in words[1:]:
        if word not in getattr(command, "commands", {}):
            break
        command = command.commands[word]
    return {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def _temporal_options(words: list[str]) -> set[str]:
    path = [w for w in words[1:] if not w.startswith("-")][:3]
    shown = ""
    for args in ([*path, "--help"], ["options"]):
        done = subprocess.run([BIN / "temporal", *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        shown += done.stdout
    return set(re.findall(r"--[\w-]+", shown))


def check_exists(command: Command) -> None:
    """A command with a placeholder: its program, subcommand and options exist."""
    words = [w.strip("[]") for w in command.words]
    program = Path(words[0]).name
    if program == "sagacity":
        known = _sagacity_options(words) | {"--help"}
    elif program == "temporal":
        known = _temporal_options(words)
    else:
        raise AssertionError(f"{command}: no way to check a placeholder command of {program}")
    used = {w.split("=")[0] for w in words if w.startswith("--")}
    assert used <= known, f"{command}: unknown options {sorted(used - known)}"


def bash_session(commands: list[Command], logs: Path, cwd: Path = REPO) -> str:
    """The script that runs ``commands`` as one reader's terminal session, in ``cwd``."""
    lines = [
        "set -e -o pipefail",
        f"cd {shlex.quote(str(cwd))}",
        "__started=()",
        # stopped like Ctrl-C: each must exit 0, or the session fails
        "__stop() { local bad=0; for p in ${__started[@]}; do kill -TERM $p 2>/dev/null || true;"
        ' done; for p in ${__started[@]}; do wait $p || { echo "background $p exited $?";'
        " bad=1; }; done; [ $bad = 0 ] || exit 1; }",
        "trap __stop EXIT",
        "__ready() {  # pid log",
        "  for _ in $(seq 1200); do",
        f'    if grep -qE {shlex.quote(READY)} "$2"; then return 0; fi',
        '    if ! kill -0 "$1" 2>/dev/null; then echo "exited early:"; cat "$2"; return 1; fi',
        "    sleep 0.1",
        "  done",
        '  echo "never ready:"; cat "$2"; return 1',
        "}",
    ]
    running: set[str] = set()
    for n, command in enumerate(commands):
        lines.append(f"printf '\\n$ %s\\n' {shlex.quote(command.text)}")
        if not command.long_running:
            lines.append(command.text)
            continue
        same = command.text.replace(".venv/bin/", "")
        if same in running:
            lines.append("echo '(already running)'")
            continue
        running.add(same)
        log = shlex.quote(str(logs / f"background-{n}.log"))
        lines += [f"{command.text} > {log} 2>&1 &", "__started+=($!)", f"__ready $! {log}"]
        if re.search(r"sagacity dev\b", command.text):
            lines.append(f"eval \"$(sed -n 's/^ *export /export /p' {log})\"")
    return "\n".join(lines) + "\n"


def reader_env() -> dict[str, str]:
    """A reader's environment: the venv's programs first, a task queue of the session's own."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    env["SAGACITY_TASK_QUEUE"] = f"docs-{uuid.uuid4().hex[:8]}"
    return env


def fresh_clone_env(data_dir: Path) -> dict[str, str]:
    """A fresh clone's: nothing configured, the dev stack's data in ``data_dir``."""
    env = reader_env()
    for name in ENDPOINT_VARIABLES:
        env.pop(name, None)
    env["SAGACITY_DATA_DIR"] = str(data_dir)
    return env


def run_session(
    commands: list[Command], *, env: dict[str, str], logs: Path, cwd: Path = REPO
) -> str:
    """Run ``commands`` (those with a placeholder only checked) as one session; its transcript."""
    runnable = []
    for command in commands:
        if PLACEHOLDER.search(command.text):
            check_exists(command)
        else:
            runnable.append(command)
    done = subprocess.run(
        ["bash", "-c", bash_session(runnable, logs, cwd)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=420,
    )
    transcript = done.stdout + done.stderr
    print(transcript)
    assert done.returncode == 0, transcript[-6000:]
    return transcript


def documented() -> list[Command]:
    return [c for document in DOCUMENTS for c in shell_commands(document)]


def test_documents_show_commands_and_every_one_is_accounted_for() -> None:
    found = documented()
    assert any("sagacity saga start" in c.text for c in found)
    assert any("sagacity worker" in c.text for c in found)
    for command in found:
        if command.skipped:
            print(f"skipped {command}\n  ({command.skipped})")


@pytest.fixture
async def docs_database(endpoints: Endpoints) -> AsyncIterator[tuple[str, str]]:
    """A database of the document's own: the session's is shared with tests that tamper with
    it, and a document that verifies the whole log must see only what its commands wrote."""
    async with scratch_database(endpoints, "sagacity_docs") as urls:
        yield urls


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_documented_commands_run_as_written(
    document: Path,
    endpoints: Endpoints,
    docs_database: tuple[str, str],
    tmp_path: Path,
) -> None:
    commands = [c for c in shell_commands(document) if not c.skipped]
    if all(PLACEHOLDER.search(c.text) for c in commands):
        for command in commands:
            check_exists(command)
        pytest.skip(f"{document.name} shows no command to run")
    if any(re.search(r"sagacity dev\b", c.text) for c in commands):
        env = fresh_clone_env(tmp_path / "data")
    else:
        owner_database_url, database_url = docs_database
        env = reader_env() | {
            "SAGACITY_DATABASE_URL": database_url,
            "SAGACITY_OWNER_DATABASE_URL": owner_database_url,
            "TEMPORAL_ADDRESS": endpoints.temporal_address,
            "TEMPORAL_NAMESPACE": endpoints.temporal_namespace,
        }
    transcript = run_session(commands, env=env, logs=tmp_path)
    if document.name == "README.md":
        # the Usage walk-through got the Order saga past its approval to a verified journal
        assert re.search(r"saga order-\w+: completed \(journal head seq 8\)", transcript)
        # `saga journal` checks the anchors when the stack configures them, else says it did not
        assert re.search(
            r"chain (and anchors verified|verified \(hash chain only[^)]*\)): 8 rows", transcript
        )


def test_the_readme_tool_declaration_is_valid() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    usage = readme[readme.index("### Declare a tool") : readme.index("### An Agents SDK agent")]
    (code,) = re.findall(r"```python\n(.*?)```", usage, flags=re.DOTALL)
    namespace: dict[str, object] = {"__name__": "readme_tools"}
    exec(compile(code, "README.md", "exec"), namespace)
    registry = ToolRegistry(namespace["TOOLS"])  # type: ignore[arg-type]
    assert {t.name for t in registry} == {"issue_refund", "email_customer"}
    assert registry.get("issue_refund").compensation is not None
