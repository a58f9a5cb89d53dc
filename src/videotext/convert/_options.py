"""The `--option` table every converter declares, and the one validator for it.

Why: the head count (and a few other settings) is not stored in the official checkpoints,
so an ignored or misspelt option gives a silently wrong model. Every converter therefore
declares its options in one table and validates what it is given against it:

    OPTIONS = Options("coot",
        Option("num_heads", 8, "the paper's config (8 heads); not stored in the checkpoint",
               "attention heads of every transformer"),
        Option("cmc_weight", 0.01, "the ActivityNet config; YouCook2 uses 0.001", "..."),
    )

    def convert(checkpoint, out_dir, **options):
        opts = OPTIONS.resolve(options)      # unknown key → one-line VideoTextError (CLI: exit 2)
        heads = opts.from_config("num_heads", config["arch"]["args"].get("heads"), "arch.args.heads")
        ...
        save_checkpoint(..., {..., "conversion": opts.meta(architecture)})

- `resolve` rejects unknown keys (naming the key, the closest valid one and all valid
  ones), converts each value to the option's type (that of its default, or `kind`) and
  fills in the defaults. `videotext.convert.convert` calls it before the converter runs.
- `Resolved.fill` / `from_config` take a value read from the checkpoint (the tensors, or
  its config) for an option the user did not give: options always override the file.
  `Resolved.note` records a config value that is not an option (MMT's expert list).
- `Resolved.meta(architecture)` is what the converter stores under `conversion` in the
  checkpoint's meta.json; `summary_lines` turns it into the lines the CLI prints
  (options with where each value came from, what was read from the file, the architecture).
- `Options.help_text()` is what `videotext convert METHOD --help` prints; each method's
  docs page lists the same table.
- The first `fill` wins: a converter fills from the config before the tensors.
A new converter (`videotext/convert/<name>.py`) needs only a module-level `OPTIONS`, a
`recognises(data)` predicate (see `_checkpoint.py`) and `convert(checkpoint, out_dir, **options)`
that starts with `OPTIONS.resolve(options)`; `tests/convert/test_convert_options.py` then wants a
misspelt-option case for it, and its docs page (docs/methods/<name>.md) a table row per option.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from videotext.errors import VideoTextError, closest

GIVEN = "option"
DEFAULT = "default: "


@dataclass(frozen=True)
class Option:
    """One converter option: its default and where that default comes from."""

    name: str
    default: Any  # None = read from the checkpoint (config or tensors), see `source`
    source: str  # where the default comes from (paper section, official code, the file)
    help: str = ""
    kind: type | None = None  # value type when the default is None
    choices: tuple[Any, ...] = ()

    @property
    def value_type(self) -> type:
        return self.kind or type(self.default)

    def coerce(self, value: Any, method: str) -> Any:
        """`value` as this option's type (CLI values arrive as int/float/bool/str)."""
        want = self.value_type
        bad = VideoTextError(f"convert {method}: option {self.name}={value!r} must be a {want.__name__}"
                             + (f" (one of {list(self.choices)})" if self.choices else ""))
        if value is None:
            return None
        if want is bool:
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise bad
        elif want is int:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
                raise bad
            value = int(value)
        elif want is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise bad
            value = float(value)
        else:
            value = want(value)
        if self.choices and value not in self.choices:
            raise bad
        return value


class Resolved(dict):
    """Option values in force (a dict), with where each one came from (`origin`)."""

    def __init__(self, values: dict[str, Any], origin: dict[str, str], table: "Options"):
        super().__init__(values)
        self.origin = origin
        self.read: dict[str, Any] = {}  # values read from the checkpoint's config
        self._table = table

    def fill(self, name: str, value: Any, origin: str) -> Any:
        """Use `value` (read from the checkpoint) unless the user gave the option or an earlier
        `fill` set it (the config before the tensors); returns the value in force."""
        if value is not None and self.origin[name].startswith(DEFAULT):
            option, method = self._table.option(name), self._table.method
            try:
                self[name] = option.coerce(value, method)
            except VideoTextError:
                raise VideoTextError(f"convert {method}: the {origin} gives {name}={value!r}, which is not a valid "
                                     f"{option.value_type.__name__}; set it with --option {name}=...") from None
            self.origin[name] = origin
        return self[name]

    def from_config(self, name: str, value: Any, where: str) -> Any:
        """`fill` with a value of the checkpoint's config found at `where` (noted for the summary)."""
        self.note(where, value)
        return self.fill(name, value, f"checkpoint config {where}")

    def note(self, key: str, value: Any) -> Any:
        """Record a value read from the checkpoint's config (printed after conversion)."""
        if value is not None:
            self.read[key] = value
        return value

    def meta(self, architecture: Mapping[str, Any]) -> dict[str, Any]:
        """The `conversion` entry of the converted checkpoint's meta.json."""
        return {"options": {k: {"value": v, "from": self.origin[k]} for k, v in self.items()},
                "checkpoint_config": dict(self.read), "architecture": dict(architecture)}


class Options:
    """A converter's option table (see the module docstring)."""

    def __init__(self, method: str, *options: Option):
        self.method = method
        self.options = {o.name: o for o in options}

    def option(self, name: str) -> Option:
        return self.options[name]

    def resolve(self, given: Mapping[str, Any]) -> Resolved:
        """Validate `given` (unknown keys are an error), coerce types, fill in defaults."""
        unknown = [k for k in given if k not in self.options]
        if unknown:
            key = unknown[0]
            near = closest(key, self.options, count=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise VideoTextError(f"convert {self.method}: unknown option {key!r}{hint}; "
                                 f"valid options: {', '.join(sorted(self.options))}")
        values, origin = {}, {}
        for name, option in self.options.items():
            if name in given and given[name] is not None:
                values[name], origin[name] = option.coerce(given[name], self.method), GIVEN
            else:
                values[name], origin[name] = option.default, f"{DEFAULT}{option.source}"
        return Resolved(values, origin, self)

    def help_text(self, width: int = 92) -> str:
        """The table `videotext convert METHOD --help` prints."""
        lines = [f"{self.method} options (--option KEY=VALUE):"]
        for o in self.options.values():
            default = "read from the checkpoint" if o.default is None else repr(o.default)
            choices = f" One of: {', '.join(map(str, o.choices))}." if o.choices else ""
            lines.append(f"  {o.name} ({o.value_type.__name__}, default {default})")
            lines += textwrap.wrap(f"{o.help}.{choices} Default: {o.source}.", width,
                                   initial_indent="      ", subsequent_indent="      ")
        return "\n".join(lines)


def summary_lines(conversion: Mapping[str, Any]) -> list[str]:
    """What the CLI prints after a conversion (from `Resolved.meta`)."""
    def show(values: Iterable[tuple[str, Any]]) -> str:
        return ", ".join(f"{k}={v}" for k, v in values)

    lines = [f"architecture: {show(conversion['architecture'].items())}"]
    if conversion.get("checkpoint_config"):
        lines.append(f"read from the checkpoint's config: {show(conversion['checkpoint_config'].items())}")
    else:
        lines.append("read from the checkpoint's config: nothing (the file has no readable config)")
    lines.append("options: " + "; ".join(f"{k}={o['value']} ({o['from']})" for k, o in conversion["options"].items()))
    return lines
