"""How a command's work travels through the package: a call trace of one `videotext` command.

Every call of a function defined in `videotext` (not while a module of it is being imported) is recorded with its module and its depth (the
videotext frames on the stack, the command's own function being 1). The walk is the sequence of
modules of those calls at a depth up to D, with consecutive calls in one module merged: its
*stops*; *modules* counts the distinct ones; *returns* counts the stops into a module the walk had
already left (stops - modules). Printed for several D, the deepest one unlimited.

    python bench/code_walk.py --json walk.json -- index build RUN FOLDER -o OUT
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

import videotext

PACKAGE = str(Path(videotext.__file__).resolve().parent)
SKIP = ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<module>")
DEPTHS = (2, 3, 4, 5, 6, 8, None)


def module_of(filename: str) -> str | None:
    """The dotted module of a source file of the package; None outside it."""
    if not filename.startswith(PACKAGE):
        return None
    relative = Path(filename).relative_to(Path(PACKAGE).parent).with_suffix("")
    parts = list(relative.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def trace(argv: list[str]) -> list[tuple[str, int]]:
    """(module, depth) of every package function called while `videotext ARGV` runs."""
    from videotext.cli import main

    calls: list[tuple[str, int]] = []

    def profile(frame, event, arg):
        if event != "call" or frame.f_code.co_name in SKIP:
            return
        module = module_of(frame.f_code.co_filename)
        if module is None or module.startswith("videotext.cli") and frame.f_code.co_name == "main":
            return
        depth, outer = 0, frame
        while outer is not None:
            outer_module = module_of(outer.f_code.co_filename)
            if outer_module is not None and outer.f_code.co_name == "<module>":
                return  # a module being imported: its decorators and registrations are not the command's work
            if outer_module is not None and outer.f_code.co_name not in SKIP:
                depth += 1
            outer = outer.f_back
        calls.append((module, depth))

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        main(argv)
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            raise
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return calls


def walk(calls: list[tuple[str, int]], depth: int | None) -> dict:
    """Stops, modules and returns of the walk at depth up to `depth` (None: every call)."""
    stops: list[str] = []
    for module, d in calls:
        if (depth is None or d <= depth) and (not stops or stops[-1] != module):
            stops.append(module)
    return {"depth": depth, "stops": len(stops), "modules": len(set(stops)), "returns": len(stops) - len(set(stops)),
            "walk": stops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="Write the walks here.")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the videotext command's arguments")
    args = parser.parse_args()
    argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    calls = trace(argv)
    walks = [walk(calls, depth) for depth in DEPTHS]
    print(f"videotext {' '.join(argv[:2])}: {len(calls)} calls")
    print("depth  modules  stops  returns")
    for w in walks:
        print(f"{w['depth'] if w['depth'] is not None else 'all':>5}  {w['modules']:7d}  {w['stops']:5d}  {w['returns']:7d}")
    if args.json:
        args.json.write_text(json.dumps({"command": argv, "walks": walks}, indent=1))


if __name__ == "__main__":
    main()
