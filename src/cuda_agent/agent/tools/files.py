"""File tools: `read_file`, `write_file`, `edit_file`, `glob`, `grep`. Every path stays inside the
workspace (see :meth:`Workspace.resolve`); the harness's files are read-only."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from ..workspace import PathError
from . import Tool, ToolResult, obj, truncate

MAX_LINE_CHARS = 2000
MAX_READ_BYTES = 2_000_000


def _resolve(env, path: str) -> Path:
    return env.workspace.resolve(path)


def _encode(text: str) -> bytes:
    """UTF-8, with lone surrogates (valid in JSON strings, not in UTF-8) replaced."""
    return text.encode("utf-8", errors="replace")


class ReadFile(Tool):
    name = "read_file"
    description = ("Read a text file of the workspace, with line numbers. Long files are shown in pages: "
                   "pass offset (first line, 1-based) and limit (number of lines).")
    parameters = obj({"path": {"type": "string", "description": "path relative to the workspace"},
                      "offset": {"type": "integer", "description": "first line to show (1-based, default 1)"},
                      "limit": {"type": "integer", "description": "lines to show (default 400)"}},
                     required=("path",))

    def run(self, args, env) -> ToolResult:
        try:
            path = _resolve(env, args["path"])
        except PathError as e:
            return ToolResult(str(e), ok=False)
        if path.is_dir():
            return ToolResult(f"{args['path']} is a directory; use glob to list it", ok=False)
        if not path.is_file():
            return ToolResult(f"{args['path']}: no such file", ok=False)
        if path.stat().st_size > MAX_READ_BYTES:
            return ToolResult(f"{args['path']}: larger than {MAX_READ_BYTES} bytes; use grep or bash (head/tail)",
                              ok=False)
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            return ToolResult(f"{args['path']}: a binary file", ok=False)
        lines = data.decode(errors="replace").splitlines()
        limit_max = env.config.limits.read_max_lines
        offset = max(1, args.get("offset", 1))
        limit = max(1, min(args.get("limit", limit_max), limit_max))
        shown = lines[offset - 1: offset - 1 + limit]
        if not lines:
            return ToolResult(f"{args['path']} is empty")
        if not shown:
            return ToolResult(f"{args['path']} has {len(lines)} lines; offset {offset} is past the end", ok=False)
        width = len(str(offset + len(shown)))
        body = "\n".join(f"{i:>{width}}\t{line[:MAX_LINE_CHARS]}" for i, line in enumerate(shown, start=offset))
        end = offset + len(shown) - 1
        if end < len(lines) or offset > 1:
            body += f"\n[lines {offset}-{end} of {len(lines)}]"
        return ToolResult(truncate(body, env.config.limits.max_output_chars))


class WriteFile(Tool):
    name = "write_file"
    description = ("Create or overwrite a file in the workspace with the given content (parent directories are "
                   "created). Your solution is model_new.py and kernels/.")
    parameters = obj({"path": {"type": "string", "description": "path relative to the workspace"},
                      "content": {"type": "string", "description": "the whole new file content"}},
                     required=("path", "content"))

    def run(self, args, env) -> ToolResult:
        try:
            path = _resolve(env, args["path"])
            env.workspace.check_writable(path)
        except PathError as e:
            return ToolResult(str(e), ok=False)
        data = _encode(args["content"])
        limit = env.config.limits.max_write_bytes
        if len(data) > limit:
            return ToolResult(f"refused: {len(data)} bytes is more than the {limit}-byte limit for one file; "
                              "split the code into several files", ok=False)
        if path.is_dir():
            return ToolResult(f"{args['path']} is a directory", ok=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        path.write_bytes(data)
        n = args["content"].count("\n") + (0 if args["content"].endswith("\n") or not args["content"] else 1)
        return ToolResult(f"{'overwrote' if existed else 'created'} {env.workspace.rel(path)} ({n} lines, {len(data)} bytes)")


class EditFile(Tool):
    name = "edit_file"
    description = ("Replace an exact string in a file. old_string must match exactly once (whitespace included), "
                   "unless replace_all is true. Include surrounding lines to make it unique.")
    parameters = obj({"path": {"type": "string", "description": "path relative to the workspace"},
                      "old_string": {"type": "string", "description": "the exact text to replace"},
                      "new_string": {"type": "string", "description": "the replacement"},
                      "replace_all": {"type": "boolean", "description": "replace every occurrence (default false)"}},
                     required=("path", "old_string", "new_string"))

    def run(self, args, env) -> ToolResult:
        try:
            path = _resolve(env, args["path"])
            env.workspace.check_writable(path)
        except PathError as e:
            return ToolResult(str(e), ok=False)
        if not path.is_file():
            return ToolResult(f"{args['path']}: no such file (use write_file to create it)", ok=False)
        old, new = args["old_string"], args["new_string"]
        if not old:
            return ToolResult("old_string is empty; use write_file to write a whole file", ok=False)
        if old == new:
            return ToolResult("old_string and new_string are the same; nothing to do", ok=False)
        text = path.read_text(errors="replace")
        count = text.count(old)
        if count == 0:
            hint = ""
            squashed = re.sub(r"\s+", " ", old.strip())
            if squashed and squashed in re.sub(r"\s+", " ", text):
                hint = " (it matches if whitespace is ignored: copy the exact indentation and line breaks)"
            return ToolResult(f"old_string not found in {args['path']}{hint}; read the file and copy the text exactly",
                              ok=False)
        if count > 1 and not args.get("replace_all", False):
            return ToolResult(f"old_string occurs {count} times in {args['path']}; add surrounding lines to make it "
                              "unique, or set replace_all to true", ok=False)
        updated = _encode(text.replace(old, new) if args.get("replace_all", False) else text.replace(old, new, 1))
        if len(updated) > env.config.limits.max_write_bytes:
            return ToolResult(f"refused: the edited file would exceed {env.config.limits.max_write_bytes} bytes",
                              ok=False)
        path.write_bytes(updated)
        return ToolResult(f"edited {env.workspace.rel(path)}: replaced {count if args.get('replace_all') else 1} "
                          f"occurrence{'s' if args.get('replace_all') and count > 1 else ''}")


def _walk(root: Path):
    """The workspace's files and folders; symlinks are skipped (one made by `bash` could point anywhere)."""
    for p in sorted(root.rglob("*")):
        if "__pycache__" in p.parts or any(part.startswith(".") for part in p.relative_to(root).parts[:-1]):
            continue
        if p.is_symlink() or any(q.is_symlink() for q in p.relative_to(root).parents if str(q) != "." and
                                 (root / q).is_symlink()):
            continue
        yield p


class Glob(Tool):
    name = "glob"
    description = "List workspace files matching a glob pattern, e.g. '**/*.cu' or 'kernels/*'."
    parameters = obj({"pattern": {"type": "string", "description": "glob pattern relative to the workspace "
                                                                   "(default '**/*')"}})

    def run(self, args, env) -> ToolResult:
        pattern = (args.get("pattern") or "**/*").strip()
        if pattern.startswith("/") or ".." in Path(pattern).parts:
            return ToolResult(f"{pattern}: patterns are relative to the workspace, without '..'", ok=False)
        root = env.workspace.root
        try:
            matches = [p for p in root.glob(pattern) if root in p.resolve().parents]
        except (ValueError, NotImplementedError) as e:
            return ToolResult(f"bad pattern {pattern!r}: {e}", ok=False)
        matches = sorted(p for p in matches if "__pycache__" not in p.parts)
        cap = env.config.limits.max_list_entries
        lines = [f"{p.relative_to(root).as_posix()}{'/' if p.is_dir() else ''}" +
                 ("" if p.is_dir() else f"  ({p.stat().st_size} bytes)") for p in matches[:cap]]
        if not lines:
            return ToolResult(f"no files match {pattern!r}")
        if len(matches) > cap:
            lines.append(f"[{len(matches) - cap} more not shown]")
        return ToolResult("\n".join(lines))


class Grep(Tool):
    name = "grep"
    description = "Search workspace files for a regular expression (Python syntax); prints file:line: text."
    parameters = obj({"pattern": {"type": "string", "description": "regular expression"},
                      "path": {"type": "string", "description": "file or directory to search (default: the workspace)"},
                      "glob": {"type": "string", "description": "only files whose name matches, e.g. '*.cu'"},
                      "ignore_case": {"type": "boolean", "description": "case-insensitive (default false)"}},
                     required=("pattern",))

    def run(self, args, env) -> ToolResult:
        try:
            rx = re.compile(args["pattern"], re.I if args.get("ignore_case") else 0)
        except re.error as e:
            return ToolResult(f"bad regular expression: {e}", ok=False)
        try:
            base = _resolve(env, args.get("path") or ".")
        except PathError as e:
            return ToolResult(str(e), ok=False)
        if not base.exists():
            return ToolResult(f"{args.get('path')}: no such file or directory", ok=False)
        files = [base] if base.is_file() else [p for p in _walk(base) if p.is_file()]
        if args.get("glob"):
            files = [p for p in files if fnmatch.fnmatch(p.name, args["glob"])]
        cap, hits, more = env.config.limits.max_list_entries, [], 0
        root = env.workspace.root
        for p in files:
            try:
                if p.stat().st_size > MAX_READ_BYTES:
                    continue
                data = p.read_bytes()
            except OSError:
                continue
            if b"\0" in data[:8192]:
                continue
            for i, line in enumerate(data.decode(errors="replace").splitlines(), start=1):
                if rx.search(line):
                    if len(hits) < cap:
                        hits.append(f"{p.relative_to(root).as_posix()}:{i}: {line[:300]}")
                    else:
                        more += 1
        if not hits:
            return ToolResult(f"no match for {args['pattern']!r}")
        if more:
            hits.append(f"[{more} more matches not shown]")
        return ToolResult(truncate("\n".join(hits), env.config.limits.max_output_chars))
