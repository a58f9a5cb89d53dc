"""Optimisers and learning-rate schedules built from `OptimConfig` / `ScheduleConfig`.

Schedule semantics (``s`` = number of optimizer steps taken so far, ``W`` =
``warmup_steps``, ``N`` = ``total_steps``, ``r`` = ``min_lr_ratio``): every param group's
lr is its base lr times ``warmup(s) · decay(s) · plateau``.

- warm-up: ``s / W`` for ``s < W`` (linear from 0, reaching the base lr at ``s = W``),
  then 1. The decay clock starts when warm-up ends: ``t = max(s - W, 0)``, so every
  decay, plateau included, begins from the full base lr.
- constant: 1.
- linear: ``r + (1 - r)(1 - p)``, ``p = min(t / (N - W), 1)``; reaches ``r`` at ``s = N``.
- cosine: ``r + (1 - r)(1 + cos(π p)) / 2``, same ``p``.
- step: ``gamma ** (t // step_size)`` — MMT §4.2 "decay by a multiplicative factor 0.95
  every 1K optimisation steps".
- exponential: ``gamma ** t``.
- plateau: 1 until `step_metric` sees ``plateau_patience`` evaluations without a new
  best and then one more (the evaluation that triggers the cut), then ×``plateau_factor``
  per reduction, floored at ``r``; after a cut, ``plateau_cooldown`` evaluations are not
  counted. This is COOT's reduce-on-plateau (official ``NewROPWarmup``, the same rule as
  ``torch.optim.lr_scheduler.ReduceLROnPlateau``), mode max since recall is maximised.
  Evaluations during warm-up update the best value but never count as bad, as in COOT.

The lr is a pure function of the scheduler state (step, number of cuts), so
``state_dict`` / ``load_state_dict`` resume bit-exactly.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import torch
from torch import nn

from videotext.config import ConfigError, OptimConfig, ScheduleConfig

OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adamw": torch.optim.AdamW,
    "adam": torch.optim.Adam,
    "radam": torch.optim.RAdam,
}
DECAYS = ("constant", "linear", "cosine", "step", "exponential", "plateau")

ParamsOrGroups = Iterable[torch.Tensor] | Iterable[dict[str, Any]] | nn.Module


# --- optimiser --------------------------------------------------------------------------
def param_groups(model: nn.Module, weight_decay: float, lr: float | None = None,
                 lr_scale: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """Split trainable parameters into a decayed group and a no-decay group.

    No weight decay on biases, on any parameter with fewer than 2 dims (norm gains and
    biases, scalars such as a learnable temperature) and on names listed by
    ``model.no_weight_decay()`` (the timm convention, e.g. position embeddings).
    ``lr_scale`` ({name prefix: factor}, longest prefix wins) puts matching parameters
    in their own groups with lr = ``lr`` × factor. Empty groups are dropped.
    """
    skip: set[str] = set()
    if hasattr(model, "no_weight_decay"):
        skip = set(model.no_weight_decay())
    scales = dict(lr_scale or {})
    if scales and lr is None:
        raise ValueError("param_groups: lr_scale needs the base lr")
    matched = {prefix: False for prefix in scales}
    groups: dict[tuple[bool, float], list[torch.Tensor]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        prefixes = [p for p in scales if name == p or name.startswith(p.rstrip(".") + ".")]
        scale = 1.0
        if prefixes:
            prefix = max(prefixes, key=len)
            matched[prefix], scale = True, float(scales[prefix])
        decayed = not (param.ndim < 2 or name.endswith(".bias") or name == "bias" or name in skip)
        groups.setdefault((decayed, scale), []).append(param)
    unused = [p for p, hit in matched.items() if not hit]
    if unused:
        raise ConfigError(f"optim.lr_scale: no trainable parameter starts with {unused}")
    out = []
    for (decayed, scale), params in sorted(groups.items(), key=lambda item: (item[0][1] != 1.0, not item[0][0])):
        group: dict[str, Any] = {"params": params, "weight_decay": weight_decay if decayed else 0.0}
        if scale != 1.0:
            group["lr"] = lr * scale
        out.append(group)
    return out


def build_optimizer(params: ParamsOrGroups, config: OptimConfig) -> torch.optim.Optimizer:
    """Make the optimizer named by ``optim.name`` (adamw | adam | radam).

    ``params`` may be a module (split with `param_groups` using ``optim.weight_decay``),
    a list of param-group dicts (a group's own ``weight_decay``/``lr`` wins) or plain
    parameters (all decayed). AdamW decouples weight decay; Adam and RAdam add it to the
    gradient (L2), as in the papers' code.
    """
    name = str(config.name).lower()
    if name not in OPTIMIZERS:
        raise ConfigError(f"optim.name: unknown optimizer {config.name!r}; expected one of {sorted(OPTIMIZERS)}")
    if config.lr <= 0:
        raise ConfigError(f"optim.lr: expected a positive learning rate, got {config.lr!r}")
    if isinstance(params, nn.Module):
        params = param_groups(params, config.weight_decay, config.lr, config.lr_scale)
    params = list(params)
    fused = {"fused": True} if name in FUSED and can_fuse(params) else {}
    return OPTIMIZERS[name](
        params,
        lr=config.lr,
        betas=tuple(config.betas),
        eps=config.eps,
        weight_decay=config.weight_decay,
        **fused,
    )


# Adam and AdamW update every parameter in one fused kernel where torch has it (CPU and CUDA since
# torch 2.4): the same update as the per-tensor loop, rounded differently. On a Frozen-sized set
# of tensors the CPU step of AdamW took 30-36 ms fused against 250-310 ms in torch's default
# (foreach) form, a quarter of a Frozen or MMT training step before.
FUSED = ("adam", "adamw")


def can_fuse(params: list[Any]) -> bool:
    """True when every parameter is a floating tensor on a CPU or CUDA device."""
    tensors = [t for p in params for t in (p["params"] if isinstance(p, dict) else [p])]
    return bool(tensors) and all(t.is_floating_point() and t.device.type in ("cpu", "cuda") for t in tensors)


# --- schedule ---------------------------------------------------------------------------
def _validate(config: ScheduleConfig, total_steps: int) -> None:
    if config.decay not in DECAYS:
        raise ConfigError(f"schedule.decay: unknown decay {config.decay!r}; expected one of {list(DECAYS)}")
    if config.warmup_steps < 0:
        raise ConfigError(f"schedule.warmup_steps: expected >= 0, got {config.warmup_steps}")
    if not 0.0 <= config.min_lr_ratio <= 1.0:
        raise ConfigError(f"schedule.min_lr_ratio: expected a value in [0, 1], got {config.min_lr_ratio}")
    if config.decay in ("linear", "cosine") and total_steps <= config.warmup_steps:
        raise ConfigError(
            f"schedule.warmup_steps={config.warmup_steps} must be smaller than the total number of "
            f"optimizer steps ({total_steps}) for decay {config.decay!r}"
        )
    if config.decay == "step" and config.step_size <= 0:
        raise ConfigError(f"schedule.step_size: expected a positive number of steps, got {config.step_size}")
    if config.decay in ("step", "exponential") and not config.gamma > 0:
        raise ConfigError(f"schedule.gamma: expected a positive factor, got {config.gamma}")
    if config.decay == "plateau":
        if not 0.0 < config.plateau_factor <= 1.0:
            raise ConfigError(f"schedule.plateau_factor: expected a value in (0, 1], got {config.plateau_factor}")
        if config.plateau_patience < 0:
            raise ConfigError(f"schedule.plateau_patience: expected >= 0, got {config.plateau_patience}")
        if config.plateau_cooldown < 0:
            raise ConfigError(f"schedule.plateau_cooldown: expected >= 0, got {config.plateau_cooldown}")


class LRSchedule:
    """Warm-up + decay (+ reduce-on-plateau) schedule driving an optimizer's lrs.

    Call `step()` once after every optimizer step and `step_metric(value)` after every
    validation evaluation (only ``decay="plateau"`` reacts). `last_lr` is the current lr
    of the first param group, `last_lrs` those of all groups.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, config: ScheduleConfig, total_steps: int = 0):
        total_steps = int(total_steps or 0)
        _validate(config, total_steps)
        self.optimizer = optimizer
        self.config = config
        self.total_steps = total_steps
        # base lrs: "initial_lr" if the optimizer's state was restored before us, else "lr".
        self.base_lrs: list[float] = []
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
            self.base_lrs.append(float(group["initial_lr"]))
        self.step_count = 0  # optimizer steps taken
        self.num_reductions = 0  # plateau cuts so far
        self.best: float | None = None  # best validation value seen (plateau only)
        self.num_bad = 0  # consecutive non-improving evaluations (plateau only)
        self.cooldown_counter = 0
        self.last_lrs: list[float] = []
        self._apply()

    # -- the rule ---------------------------------------------------------------------
    def factor(self, step: int | None = None) -> float:
        """The lr multiplier at optimizer step ``step`` (default: now) given the plateau state."""
        cfg = self.config
        step = self.step_count if step is None else step
        warmup = cfg.warmup_steps
        scale = step / warmup if step < warmup else 1.0
        t = max(step - warmup, 0)  # steps since the end of warm-up
        floor = cfg.min_lr_ratio
        if cfg.decay in ("linear", "cosine"):
            progress = min(t / (self.total_steps - warmup), 1.0)
            shape = 1.0 - progress if cfg.decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
            decay = floor + (1.0 - floor) * shape
        elif cfg.decay == "step":
            decay = cfg.gamma ** (t // cfg.step_size)
        elif cfg.decay == "exponential":
            decay = cfg.gamma**t
        elif cfg.decay == "plateau":
            decay = max(cfg.plateau_factor**self.num_reductions, floor)
        else:  # constant
            decay = 1.0
        return scale * decay

    def _apply(self) -> None:
        factor = self.factor()
        self.last_lrs = [base * factor for base in self.base_lrs]
        for group, lr in zip(self.optimizer.param_groups, self.last_lrs):
            group["lr"] = lr

    # -- public interface -------------------------------------------------------------
    @property
    def last_lr(self) -> float:
        return self.last_lrs[0]

    def get_last_lr(self) -> list[float]:
        """Same as `last_lrs` (the torch scheduler spelling)."""
        return list(self.last_lrs)

    def step(self) -> None:
        """Advance by one optimizer step and set the lrs for the next one."""
        self.step_count += 1
        self._apply()

    def step_metric(self, value: float) -> None:
        """Report a validation value (higher is better); may cut the lr for ``plateau``."""
        if self.config.decay != "plateau":
            return
        value = float(value)
        improved = self.best is None or value > self.best  # NaN never improves
        if improved:
            self.best = value
            self.num_bad = 0
        if self.step_count < self.config.warmup_steps:
            return  # COOT: the plateau rule does not run during warm-up
        if not improved:
            self.num_bad += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad = 0
        if self.num_bad > self.config.plateau_patience:
            self.num_reductions += 1
            self.cooldown_counter = self.config.plateau_cooldown
            self.num_bad = 0
        self._apply()

    def state_dict(self) -> dict[str, Any]:
        return {
            "decay": self.config.decay,
            "step_count": self.step_count,
            "num_reductions": self.num_reductions,
            "best": self.best,
            "num_bad": self.num_bad,
            "cooldown_counter": self.cooldown_counter,
            "base_lrs": list(self.base_lrs),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict` and re-apply its lrs to the optimizer."""
        if state.get("decay", self.config.decay) != self.config.decay:
            raise ConfigError(
                f"schedule.decay: the checkpoint was trained with decay {state['decay']!r} "
                f"but the config says {self.config.decay!r}"
            )
        if len(state["base_lrs"]) != len(self.optimizer.param_groups):
            raise ValueError(
                f"scheduler state has {len(state['base_lrs'])} param groups, "
                f"the optimizer has {len(self.optimizer.param_groups)}"
            )
        self.step_count = int(state["step_count"])
        self.num_reductions = int(state["num_reductions"])
        self.best = None if state["best"] is None else float(state["best"])
        self.num_bad = int(state["num_bad"])
        self.cooldown_counter = int(state["cooldown_counter"])
        self.base_lrs = [float(lr) for lr in state["base_lrs"]]
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["initial_lr"] = base
        self._apply()


def depends_on_budget(config: ScheduleConfig) -> bool:
    """Whether the lr curve depends on the total number of steps (linear and cosine decay reach
    their floor at the end of the budget; warm-up, step, exponential and plateau do not): a run of
    such a schedule cannot be continued to a larger `train.epochs` as if it had been planned so."""
    return config.decay in ("linear", "cosine")


def build_scheduler(optimizer: torch.optim.Optimizer, config: ScheduleConfig, total_steps: int = 0) -> LRSchedule:
    """Make the schedule of ``config`` over ``total_steps`` optimizer steps (needed by
    linear and cosine; ignored by the others)."""
    return LRSchedule(optimizer, config, total_steps)


__all__ = ["DECAYS", "OPTIMIZERS", "LRSchedule", "build_optimizer", "build_scheduler", "param_groups"]
