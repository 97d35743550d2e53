"""Every example runs as written, in a fresh folder, and prints what it promises."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

# What each example must print (a line each, in order), beyond running without an error.
EXPECTED: dict[str, list[str]] = {
    "quickstart.py": ["user: I want to fly to Tokyo in April", "assistant: Great - economy or business?",
                      "remembered: ['I want to fly to Tokyo in April', 'Great - economy or business?']"],
    "agent.py": ["Hi Ada! Noted.", "blocked: Please don't share passwords.", "finish: tool-calls",
                 "Booked - have a great trip!", "4 messages stored; the model saw 4"],
    "working_memory.py": ["# User Information", "- **First Name**: Ada", "Profile(name='Ada', city='Lyon', diet=[])"],
    "titles_and_observations.py": ["title: Flights to Tokyo", "* 🔴 Ada plans a family trip to Tokyo in April",
                                   "sent verbatim: ['What should we pack?']"],
    "recall_tool.py": ["the model sees: * 🔴 Ada shared the door code of the Lisbon flat",
                       "it recalls the messages before the group's last", "The door code is 4821-AB."],
    # The caller's span is the parent of the operation, the operation of the mailbox hop, that of the commit.
    "tracing.py": ["handle request", "  threadmind.memory.create_thread t1", "    threadmind.actor.CreateThread t1",
                   "      threadmind.store.group_commit", "  threadmind.memory.save_messages t1",
                   "    threadmind.actor.SaveMessages t1", "      threadmind.store.group_commit"],
}



def test_every_example_is_checked() -> None:
    scripts = {p.name for p in EXAMPLES.glob("*.py")}
    assert scripts - {"chat_server.py"} == set(EXPECTED)  # the server has tests of its own (tests/ui)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_example_runs_and_prints_what_it_promises(name: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line.rstrip() for line in done.stdout.splitlines()]
    position = 0
    for wanted in EXPECTED[name]:
        assert wanted in lines[position:], f"{name} did not print {wanted!r} (after line {position}):\n{done.stdout}"
        position = lines.index(wanted, position) + 1
    assert done.stderr == "", done.stderr


README = REPO / "README.md"
_MARKER = re.compile(r"<!-- example: (examples/[\w.]+) -->\n```python\n(.*?)```\n", re.S)


def test_every_python_block_of_the_readme_is_an_example_file_verbatim() -> None:
    """The README quotes examples/ and nothing else, so its snippets are the files the test above runs."""
    text = README.read_text(encoding="utf-8")
    quoted = _MARKER.findall(text)
    assert len(quoted) == text.count("```python"), "a ```python block without an <!-- example: ... --> marker"
    for path, code in quoted:
        assert (REPO / path).read_text(encoding="utf-8") == code, f"README's copy of {path} differs from the file"
    assert {Path(path).name for path, _ in quoted} == set(EXPECTED) | {"chat_server.py"}


def _bash_block(name: str) -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(rf"<!-- commands: {name} -->\n```bash\n(.*?)```\n", text, re.S)
    assert found, f"README has no <!-- commands: {name} --> block"
    return found.group(1)


@pytest.mark.slow
def test_the_readme_cli_commands_run_as_written(tmp_path: Path) -> None:
    script = _bash_block("cli")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    out = done.stdout
    assert "2 threads of resource 'ada'" in out and "Ada's trip to Tokyo" in out
    assert "imported 6 messages into 2 threads (2 new); 0 bad lines" in out
    assert "reindex: made 6 vectors in memory_messages_384" in out
    assert "6 vectors; 0 messages without one; ok" in out
    hits = out.split("hits in resource 'ada'", 1)[1].splitlines()[2:6]
    assert all(" demo-" in line for line in hits), hits  # the search stays in ada's threads
