"""Every fenced code block of README.md and docs/*.md runs, or is checked, as written.

- ``python`` blocks of one file run in order in one namespace (a block may use what an earlier one
  defined, as a reader does), in a fresh working directory with ``$S3CKPT_URL`` a new local
  directory store and ``$S3CKPT_KEY`` a new key. A doc whose blocks name ``s3://bucket/...`` or
  ``kms:alias/...`` runs against the moto server: ``AWS_ENDPOINT_URL`` points at it, and the
  buckets and KMS aliases it names exist. What a block claims it checks with ``assert``.
- ``python file=NAME.py`` is a test module: it is written to NAME.py and run by pytest, and when
  examples/NAME.py exists the block must be that file's code.
- ``bash``/``sh``/``console`` commands: ``s3ckpt ...`` runs through the installed CLI (exit status
  0, or non-zero where the output shown starts with ``error:``; a console block's output must be
  what the doc shows, ``...`` standing for any text); ``pytest ...`` must collect, and every
  variable set in front of it must be read by the test files it names; a command CI runs (the
  README quickstart) is checked against .ci/run instead of being run inside the suite.
- ``json`` blocks parse; ``text`` blocks are prose-like (synopses, layouts), and the CLI synopsis,
  the kill_and_resume signature and the store config layout are compared with the code.

Any other tag, or none, fails ``test_every_block_has_a_tag_this_test_runs_or_checks``.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import types
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import typer
import typer.core
import typer.main

import s3ckpt
import s3ckpt.testing
from s3ckpt import cli
from s3ckpt.testing import MotoServer
from tests.doc_blocks import Block, Command, blocks, commands, output_matches

REPO = Path(__file__).resolve().parents[1]
DOCS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
PYTHON = {"python"}
SHELL = {"bash", "sh", "console"}
CHECKED = {"json", "text"}
ATTRIBUTES = {"file"}  # python file=NAME.py

_BUCKET = re.compile(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])")
_KMS_ALIAS = re.compile(r"kms:(alias/[A-Za-z0-9/_-]+)")


def _runnable(doc: Path) -> list[Block]:
    return [b for b in blocks(doc) if b.lang in PYTHON | SHELL]


def untested_blocks(docs: Iterator[Path] | tuple[Path, ...]) -> list[str]:
    """Blocks with a tag this test neither runs nor checks, or an attribute it does not know."""
    wrong = []
    for doc in docs:
        for block in blocks(doc):
            if block.lang not in PYTHON | SHELL | CHECKED:
                wrong.append(f"{block.where}: tag {block.lang or '(none)'!r}")
            elif set(block.attrs) - ATTRIBUTES or (block.attrs and block.lang not in PYTHON):
                wrong.append(f"{block.where}: attributes {block.attrs}")
    return wrong


def test_every_block_has_a_tag_this_test_runs_or_checks() -> None:
    assert untested_blocks(DOCS) == [], "tag each block python, bash, sh, console, json or text (see this module)"


# -- running a doc -----------------------------------------------------------------------------


@dataclass
class DocEnv:
    """Where a doc's blocks run: a fresh working directory, and the moto server if it names S3."""

    doc: Path
    cwd: Path
    server: MotoServer | None


def _ci_commands() -> list[str]:
    """The commands .ci/run runs, in order (shell setup lines and `|| exit 1` guards left out)."""
    found = []
    for raw in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "set ", "cd ")):
            continue
        found.append(line.removesuffix("|| exit 1").strip())
    return found


def _run_python(block: Block, module: types.ModuleType) -> None:
    # Padding keeps line numbers those of the Markdown file, so a traceback points into the doc.
    code = compile("\n" * (block.line - 1) + block.text, str(block.path), "exec")
    exec(code, module.__dict__)


def _code(text: str) -> str:
    """The code of a module, without its docstring or comments."""
    tree = ast.parse(text)
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return ast.dump(ast.Module(body=body, type_ignores=[]))


def _run_test_module(block: Block, env: DocEnv) -> None:
    name = block.attrs["file"]
    example = REPO / "examples" / name
    if example.exists():
        assert _code(block.text) == _code(example.read_text(encoding="utf-8")), (
            f"{block.where} is not the code of examples/{name}: make them the same"
        )
    (env.cwd / name).write_text(block.text, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name],
        cwd=env.cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, f"{block.where}: pytest {name} failed\n{result.stdout[-4000:]}{result.stderr[-2000:]}"
    assert re.fullmatch(r"\d+ passed in .*", summary), f"{block.where}: every test must pass, none skipped: {summary}"


def _run_command(command: Command, block: Block, env: DocEnv) -> None:
    argv = command.argv
    if command.line in _ci_commands():
        return  # CI runs it (test_the_readme_quickstart_is_what_ci_runs)
    if argv[:1] == ["s3ckpt"]:
        program = shutil.which("s3ckpt")
        assert program is not None, "the s3ckpt command is not installed: pip install -e ."
        result = subprocess.run(
            [program, *argv[1:]],
            cwd=env.cwd,
            env={**os.environ, **command.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        )
        fails = bool(command.output) and command.output[0].startswith("error:")
        assert (result.returncode != 0) == fails, (
            f"{block.where}: `{command.line}` exited {result.returncode}\n{result.stdout[-3000:]}"
        )
        if block.lang == "console":
            assert output_matches(command.output, result.stdout), (
                f"{block.where}: `{command.line}` printed\n{result.stdout}\nand the doc shows\n" + "\n".join(command.output)
            )
        return
    if argv[:1] == ["pytest"]:
        files = [REPO / a for a in argv[1:] if a.endswith(".py")]
        for name in command.env:
            for file in files:
                assert f'"{name}"' in file.read_text(encoding="utf-8"), f"{block.where}: {file.name} does not read {name}"
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *argv[1:]],
            cwd=REPO,
            env={**os.environ, **command.env},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, f"{block.where}: `{command.line}` does not collect\n{result.stdout[-3000:]}"
        return
    raise AssertionError(f"{block.where}: this test does not know how to run or check `{command.line}`")


def run_doc(env: DocEnv) -> int:
    """Run the blocks of ``env.doc`` in order; return how many ran."""
    doc = env.doc
    module = types.ModuleType("docs_" + re.sub(r"\W", "_", doc.stem) + "_" + uuid.uuid4().hex[:8])
    sys.modules[module.__name__] = module  # dataclasses, TypedDicts and pydantic look their module up
    try:
        runnable = _runnable(doc)
        for block in runnable:
            if block.lang in PYTHON and "file" in block.attrs:
                _run_test_module(block, env)
            elif block.lang in PYTHON:
                _run_python(block, module)
            else:
                for command in commands(block):
                    _run_command(command, block, env)
        return len(runnable)
    finally:
        del sys.modules[module.__name__]


def _names_in(doc: Path, pattern: re.Pattern[str]) -> set[str]:
    return {m for b in _runnable(doc) for m in pattern.findall(b.text)}


def _empty_bucket(client: Any, bucket: str) -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=obj["Key"])


@pytest.fixture
def doc_env(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DocEnv]:
    doc: Path = request.param
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("S3CKPT_URL", str(tmp_path / "store"))
    monkeypatch.setenv("S3CKPT_KEY", s3ckpt.generate_key())
    buckets, aliases = _names_in(doc, _BUCKET), _names_in(doc, _KMS_ALIAS)
    if not buckets and not aliases:
        yield DocEnv(doc, cwd, None)
        return
    server: MotoServer = request.getfixturevalue("moto_server")
    server.inject = None
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint_url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3 = boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1")
    for bucket in buckets:
        s3.create_bucket(Bucket=bucket)
    kms = boto3.client("kms", endpoint_url=server.endpoint_url, region_name="us-east-1")
    existing = {a["AliasName"] for a in kms.list_aliases()["Aliases"]}
    for alias in aliases - existing:
        kms.create_alias(AliasName=alias, TargetKeyId=kms.create_key()["KeyMetadata"]["KeyId"])
    yield DocEnv(doc, cwd, server)
    for bucket in buckets:  # the server lives for the session: leave no bucket named like a doc's
        _empty_bucket(s3, bucket)
        s3.delete_bucket(Bucket=bucket)


RUNNABLE_DOCS = [doc for doc in DOCS if _runnable(doc)]


@pytest.mark.parametrize("doc_env", RUNNABLE_DOCS, ids=[d.name for d in RUNNABLE_DOCS], indirect=True)
def test_the_code_in_each_doc_runs_as_written(doc_env: DocEnv) -> None:
    assert run_doc(doc_env) == len(_runnable(doc_env.doc))


# -- blocks that are checked against the code ----------------------------------------------------


def test_the_readme_quickstart_is_what_ci_runs() -> None:
    quickstart = commands(blocks(REPO / "README.md")[0])
    assert [c.line for c in quickstart] == ['pip install -e ".[dev]" && s3ckpt demo', "pytest"]
    assert _ci_commands()[:2] == [c.line for c in quickstart], ".ci/run must begin with the README's quickstart"


def test_json_blocks_parse() -> None:
    found = [b for doc in DOCS for b in blocks(doc) if b.lang == "json"]
    assert found
    for block in found:
        try:
            json.loads(block.text)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"{block.where}: not JSON ({exc}); tag a sketch `text`") from None


def test_the_config_layout_in_format_md_is_what_a_new_store_writes(tmp_path: Path) -> None:
    layouts = [json.loads(b.text) for b in blocks(REPO / "docs" / "FORMAT.md") if b.lang == "json"]
    (shown,) = [layout for layout in layouts if layout.get("format") == "s3ckpt"]
    s3ckpt.open_store(str(tmp_path / "store"), key=s3ckpt.generate_key()).close()
    written = json.loads((tmp_path / "store" / "config").read_text(encoding="utf-8"))
    assert list(shown) == list(written)
    for field in ("format", "version", "chunker", "cipher", "content_id", "compression"):
        assert shown[field] == written[field], field


def _synopsis() -> list[str]:
    (block,) = [b for b in blocks(REPO / "README.md") if b.lang == "text" and b.text.startswith("s3ckpt ")]
    return block.text.splitlines()


def test_the_cli_synopsis_in_the_readme_is_the_cli() -> None:
    root = typer.main.get_command(cli.app)
    assert isinstance(root, typer.core.TyperGroup)
    first, *rest = _synopsis()
    options = {o for p in root.params for o in p.opts if o not in ("--version", "--help")}
    assert set(re.findall(r"\[(--[a-z-]+)", first)) == options
    shown: dict[str, list[str]] = {}
    for line in rest:
        if line.startswith("  ") and line[2] != " ":
            name, *words = line.split("  ")[1].split()
            shown[name] = words
    assert set(shown) == set(root.commands)
    for name, words in shown.items():
        command = root.commands[name]
        if name == "key":
            assert words == ["|".join(typer.main.get_command(cli.key_app).commands)]  # type: ignore[attr-defined]
            continue
        synopsis = " ".join(words).replace("[", " ").replace("]", " ").replace("|", " ").split()
        positional = [w for i, w in enumerate(synopsis) if w.isupper() and (i == 0 or not synopsis[i - 1].startswith("--"))]
        arguments = [p for p in command.params if isinstance(p, typer.core.TyperArgument)]
        assert len(positional) == len(arguments), f"{name}: the synopsis shows {positional}"
        opts = {o for p in command.params for o in p.opts}
        assert {w for w in synopsis if w.startswith("--")} <= opts, name
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (status,) = [p for p in readme.split("\n\n") if p.startswith("Exit status")]
    for code in (cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_USAGE, cli.EXIT_NO_STORE, cli.EXIT_WRONG_KEY, cli.EXIT_CONFLICT):
        assert f"{code} " in status, f"the README's exit status paragraph does not explain {code}"


def test_the_kill_and_resume_signature_in_testing_md_is_the_function() -> None:
    (block,) = [b for b in blocks(REPO / "docs" / "testing.md") if b.lang == "text" and b.text.startswith("kill_and_resume(")]
    (shown,) = ast.parse(f"def {block.text.strip()}: ...").body  # a signature is a def without its body
    assert isinstance(shown, ast.FunctionDef)
    real = inspect.signature(s3ckpt.testing.kill_and_resume)
    parameters = real.parameters.values()
    assert [a.arg for a in shown.args.args] == [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert [a.arg for a in shown.args.kwonlyargs] == [p.name for p in parameters if p.kind is p.KEYWORD_ONLY]
    for arg, default in zip(shown.args.kwonlyargs, shown.args.kw_defaults, strict=True):
        assert default is not None, f"{arg.arg}: the signature shows no default"
        value = getattr(s3ckpt.testing, default.id) if isinstance(default, ast.Name) else ast.literal_eval(default)
        assert value == real.parameters[arg.arg].default, arg.arg
    assert isinstance(shown.returns, ast.Name)
    assert shown.returns.id == real.return_annotation  # a string: the module has `from __future__ import annotations`


def test_the_langgraph_example_the_docs_name_runs(tmp_path: Path) -> None:
    assert "examples/langgraph_agent.py" in (REPO / "docs" / "langgraph.md").read_text(encoding="utf-8")
    example = REPO / "examples" / "langgraph_agent.py"
    result = subprocess.run([sys.executable, str(example)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "result: 3 steps done for 'the refund email'"
    assert lines[1] == "state read back: 3 steps done for 'the refund email'"


# -- the checks themselves fail when a block is wrong ---------------------------------------------


def test_a_block_that_fails_fails_its_doc(tmp_path: Path) -> None:
    doc = tmp_path / "bad.md"
    doc.write_text("Intro.\n\n```python\nx = 1\n```\n\n```python\nassert x == 2, 'x is 1'\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="x is 1") as failure:
        run_doc(DocEnv(doc, tmp_path, None))
    assert any(entry.path == doc and entry.lineno + 1 == 8 for entry in failure.traceback)


def test_a_command_whose_output_differs_fails_its_doc(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.md", tmp_path / "bad.md"
    good.write_text(f"```console\n$ s3ckpt --version\ns3ckpt {s3ckpt.__version__}\n$ s3ckpt key new\n...\n```\n", "utf-8")
    bad.write_text("```console\n$ s3ckpt --version\ns3ckpt 0.0.0-not-this\n```\n", encoding="utf-8")
    assert run_doc(DocEnv(good, tmp_path, None)) == 1
    with pytest.raises(AssertionError, match=r"0\.0\.0-not-this"):
        run_doc(DocEnv(bad, tmp_path, None))


def test_a_command_this_test_does_not_know_fails_its_doc(tmp_path: Path) -> None:
    doc = tmp_path / "unknown.md"
    doc.write_text("```bash\nrm -rf build\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="does not know how to run or check `rm -rf build`"):
        run_doc(DocEnv(doc, tmp_path, None))


def test_an_untagged_block_is_reported(tmp_path: Path) -> None:
    doc = tmp_path / "tags.md"
    doc.write_text("```\nplain\n```\n\n```rust\nfn main() {}\n```\n\n```text\nok\n```\n\n````python\n```\n````\n", "utf-8")
    assert untested_blocks((doc,)) == ["tags.md:2: tag '(none)'", "tags.md:6: tag 'rust'"]
