"""Optimisers and lr schedules: hand-computed lrs, plateau rule, exact resume."""
from __future__ import annotations

import io
import math

import pytest
import torch
from torch import nn

from videotext.config import ConfigError, OptimConfig, ScheduleConfig
from videotext.train.schedules import build_optimizer, build_scheduler, param_groups


def make_opt(lr: float = 1.0, groups: int = 1) -> torch.optim.Optimizer:
    params = [{"params": [nn.Parameter(torch.zeros(2))], "lr": lr / (i + 1)} for i in range(groups)]
    return torch.optim.SGD(params, lr=lr)


def lrs(config: ScheduleConfig, total_steps: int, until: int, lr: float = 1.0) -> list[float]:
    """lr used by optimizer steps 0 … until (inclusive)."""
    sched = build_scheduler(make_opt(lr), config, total_steps)
    out = [sched.last_lr]
    for _ in range(until):
        sched.step()
        out.append(sched.last_lr)
    return out


def approx(values, expected):
    return values == pytest.approx(expected, abs=1e-12)


# --- decays -----------------------------------------------------------------------------
def test_constant_with_warmup():
    # W = 4: 0/4, 1/4, 2/4, 3/4, then the base lr
    assert approx(lrs(ScheduleConfig(warmup_steps=4), 0, 6), [0, 0.25, 0.5, 0.75, 1, 1, 1])
    assert approx(lrs(ScheduleConfig(), 0, 2, lr=3e-4), [3e-4, 3e-4, 3e-4])


def test_linear_with_warmup_and_floor():
    # W = 2, N = 10, r = 0.1: after warm-up p = (s-2)/8, lr = 0.1 + 0.9 (1 - p)
    values = lrs(ScheduleConfig(warmup_steps=2, decay="linear", min_lr_ratio=0.1), 10, 12)
    assert approx(values[0:3], [0.0, 0.5, 1.0])
    assert approx(values[6], 0.1 + 0.9 * 0.5)  # s = 6: p = 4/8 → 0.55
    assert approx(values[10], 0.1)  # s = N reaches the floor …
    assert approx(values[12], 0.1)  # … and stays there
    # r = 0 reaches 0 at N: s = 5 with N = 10, W = 0 → 1 - 5/10 = 0.5
    assert approx(lrs(ScheduleConfig(decay="linear"), 10, 10)[5::5], [0.5, 0.0])


def test_cosine():
    # W = 0, N = 4: lr = (1 + cos(π s/4)) / 2 → 1, 0.853553, 0.5, 0.146447, 0
    values = lrs(ScheduleConfig(decay="cosine"), 4, 5)
    c = math.cos(math.pi / 4)  # 0.7071067811865476
    assert approx(values, [1.0, (1 + c) / 2, 0.5, (1 - c) / 2, 0.0, 0.0])
    assert abs(values[1] - 0.8535533905932737) < 1e-12
    # floor r = 0.2, warm-up W = 2, N = 6: s = 4 is half-way (p = 2/4) → 0.2 + 0.8·0.5 = 0.6
    floored = lrs(ScheduleConfig(decay="cosine", warmup_steps=2, min_lr_ratio=0.2), 6, 7)
    assert approx([floored[1], floored[2], floored[4], floored[6], floored[7]], [0.5, 1.0, 0.6, 0.2, 0.2])


def test_step_decay_mmt():
    # MMT §4.2: ×0.95 every 1K steps; here ×0.5 every 3 steps
    values = lrs(ScheduleConfig(decay="step", step_size=3, gamma=0.5), 0, 7)
    assert approx(values, [1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25])
    # the decay clock starts after warm-up: W = 2 → full lr at s = 2…4, 0.5 from s = 5
    warm = lrs(ScheduleConfig(decay="step", step_size=3, gamma=0.5, warmup_steps=2), 0, 8)
    assert approx(warm, [0, 0.5, 1, 1, 1, 0.5, 0.5, 0.5, 0.25])
    # MMT's own numbers at step 2500: 5e-5 · 0.95^2
    mmt = lrs(ScheduleConfig(decay="step", step_size=1000, gamma=0.95), 0, 2500, lr=5e-5)
    assert mmt[999] == 5e-5 and mmt[1000] == pytest.approx(5e-5 * 0.95) and mmt[2500] == pytest.approx(5e-5 * 0.9025)


def test_exponential():
    # gamma 0.9 per step: s = 3 → 0.729; with W = 1: s = 4 → t = 3 → 0.729
    assert approx(lrs(ScheduleConfig(decay="exponential", gamma=0.9), 0, 3), [1, 0.9, 0.81, 0.729])
    assert approx(lrs(ScheduleConfig(decay="exponential", gamma=0.9, warmup_steps=1), 0, 4)[4], 0.729)


def test_lr_is_applied_to_every_group():
    opt = make_opt(lr=1.0, groups=2)  # base lrs 1.0 and 0.5
    sched = build_scheduler(opt, ScheduleConfig(warmup_steps=4), 0)
    sched.step()
    assert sched.last_lrs == [0.25, 0.125] and sched.last_lr == 0.25
    assert [g["lr"] for g in opt.param_groups] == [0.25, 0.125]
    assert sched.get_last_lr() == [0.25, 0.125]


def test_step_metric_is_ignored_by_non_plateau_decays():
    sched = build_scheduler(make_opt(), ScheduleConfig(decay="cosine"), 10)
    for value in [1.0, 0.0, 0.0, 0.0, 0.0]:
        sched.step_metric(value)
    assert sched.last_lr == 1.0


# --- plateau (COOT) ---------------------------------------------------------------------
def test_plateau_reduces_after_patience_bad_evaluations_not_before():
    sched = build_scheduler(make_opt(), ScheduleConfig(decay="plateau", plateau_patience=2, plateau_factor=0.1), 0)
    sched.step()
    sched.step_metric(50.0)  # first evaluation: the baseline
    sched.step_metric(49.0)  # bad 1 (patience allows it)
    sched.step_metric(50.0)  # bad 2 (equal is not better)
    assert sched.last_lr == 1.0  # patience = 2 bad evaluations tolerated
    sched.step_metric(48.0)  # bad 3 > patience → cut
    assert sched.last_lr == pytest.approx(0.1)
    sched.step_metric(47.0)  # counter restarted after the cut: bad 1
    sched.step_metric(46.0)  # bad 2
    assert sched.last_lr == pytest.approx(0.1)
    sched.step_metric(51.0)  # improvement resets the count
    sched.step_metric(50.0)
    sched.step_metric(50.0)
    assert sched.last_lr == pytest.approx(0.1)
    sched.step_metric(50.0)  # third bad in a row → second cut
    assert sched.last_lr == pytest.approx(0.01)
    sched.step()
    assert sched.last_lr == pytest.approx(0.01)  # optimizer steps keep the reduced lr


def test_plateau_cooldown_and_floor():
    config = ScheduleConfig(
        decay="plateau", plateau_patience=0, plateau_factor=0.1, plateau_cooldown=2, min_lr_ratio=0.005
    )
    sched = build_scheduler(make_opt(), config, 0)
    sched.step_metric(1.0)
    sched.step_metric(0.5)  # patience 0: first bad evaluation cuts
    assert sched.last_lr == pytest.approx(0.1)
    sched.step_metric(0.5)  # cooldown 2 → 1
    sched.step_metric(0.5)  # cooldown 1 → 0
    assert sched.last_lr == pytest.approx(0.1)
    sched.step_metric(0.5)  # counted again → cut: 0.01
    assert sched.last_lr == pytest.approx(0.01)
    for _ in range(3):
        sched.step_metric(0.5)
    assert sched.last_lr == pytest.approx(0.005)  # 0.001 floored at min_lr_ratio


def test_plateau_composes_with_warmup():
    config = ScheduleConfig(decay="plateau", warmup_steps=4, plateau_patience=0, plateau_factor=0.5)
    sched = build_scheduler(make_opt(), config, 0)
    sched.step()
    sched.step()
    sched.step_metric(10.0)
    sched.step_metric(5.0)  # during warm-up: never counted as bad
    sched.step_metric(5.0)
    assert sched.last_lr == pytest.approx(0.5)  # s = 2 of W = 4
    sched.step()
    sched.step()
    assert sched.last_lr == 1.0
    sched.step_metric(9.0)  # after warm-up, below the best seen in warm-up (10) → cut
    assert sched.last_lr == pytest.approx(0.5)


# --- resume -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "config",
    [
        ScheduleConfig(decay="cosine", warmup_steps=3, min_lr_ratio=0.1),
        ScheduleConfig(decay="step", step_size=4, gamma=0.7, warmup_steps=2),
        ScheduleConfig(decay="plateau", warmup_steps=2, plateau_patience=1, plateau_cooldown=1),
    ],
    ids=["cosine", "step", "plateau"],
)
def test_state_dict_round_trip(config):
    metrics = [5.0, 4.0, 4.0, 6.0, 3.0, 3.0, 2.0, 7.0, 1.0, 1.0, 1.0, 1.0]

    def run(sched, steps):
        for step in steps:
            sched.step()
            if step % 2 == 1:
                sched.step_metric(metrics[step // 2])
        return sched.last_lrs

    original = build_scheduler(make_opt(groups=2), config, 24)
    run(original, range(0, 11))
    buffer = io.BytesIO()
    torch.save(original.state_dict(), buffer)
    buffer.seek(0)

    opt = make_opt(groups=2)
    resumed = build_scheduler(opt, config, 24)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert resumed.last_lrs == original.last_lrs
    assert [g["lr"] for g in opt.param_groups] == original.last_lrs
    for step in range(11, 24):
        assert run(original, [step]) == run(resumed, [step])  # exactly equal, not approx
    assert resumed.state_dict() == original.state_dict()


def test_load_state_dict_rejects_other_decay():
    a = build_scheduler(make_opt(), ScheduleConfig(decay="cosine"), 10)
    b = build_scheduler(make_opt(), ScheduleConfig(decay="linear"), 10)
    with pytest.raises(ConfigError, match="schedule.decay"):
        b.load_state_dict(a.state_dict())


def test_schedule_config_errors():
    with pytest.raises(ConfigError, match="schedule.decay.*'poly'.*cosine"):
        build_scheduler(make_opt(), ScheduleConfig(decay="poly"), 10)
    with pytest.raises(ConfigError, match="schedule.warmup_steps"):
        build_scheduler(make_opt(), ScheduleConfig(decay="cosine", warmup_steps=10), 10)
    with pytest.raises(ConfigError, match="schedule.step_size"):
        build_scheduler(make_opt(), ScheduleConfig(decay="step", step_size=0), 10)
    with pytest.raises(ConfigError, match="schedule.plateau_factor"):
        build_scheduler(make_opt(), ScheduleConfig(decay="plateau", plateau_factor=2.0), 10)


# --- optimizer --------------------------------------------------------------------------
class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)
        self.pos_embed = nn.Parameter(torch.zeros(1, 5, 3))
        self.frozen = nn.Linear(3, 3)
        self.frozen.requires_grad_(False)

    def no_weight_decay(self):
        return {"pos_embed"}


def test_param_groups_skip_biases_norms_and_listed():
    model = Tiny()
    groups = param_groups(model, weight_decay=0.05)
    assert [g["weight_decay"] for g in groups] == [0.05, 0.0]
    assert [id(p) for p in groups[0]["params"]] == [id(model.proj.weight)]
    no_decay = {id(p) for p in groups[1]["params"]}
    assert no_decay == {id(model.proj.bias), id(model.norm.weight), id(model.norm.bias), id(model.pos_embed)}


def test_lr_scale_gives_prefixes_their_own_lr_and_the_schedule_keeps_the_ratio():
    from videotext.config import ConfigError, ScheduleConfig

    model = Tiny()
    config = OptimConfig(name="adam", lr=1e-3, weight_decay=0.05, lr_scale={"proj": 0.1, "proj.bias": 0.5})
    opt = build_optimizer(model, config)
    lrs = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert lrs[id(model.proj.weight)] == pytest.approx(1e-4)  # "proj"
    assert lrs[id(model.proj.bias)] == pytest.approx(5e-4)  # the longer prefix wins
    assert lrs[id(model.norm.weight)] == pytest.approx(1e-3)  # unscaled
    decay = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    assert decay[id(model.proj.weight)] == 0.05 and decay[id(model.proj.bias)] == 0.0
    schedule = build_scheduler(opt, ScheduleConfig(warmup_steps=0, decay="linear"), total_steps=4)
    schedule.step()
    schedule.step()  # half-way: every group at half its own base lr
    lrs = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert lrs[id(model.proj.weight)] == pytest.approx(0.5e-4) and lrs[id(model.norm.weight)] == pytest.approx(0.5e-3)
    with pytest.raises(ConfigError, match="no trainable parameter starts with"):
        build_optimizer(model, OptimConfig(lr=1e-3, lr_scale={"text_encoder": 0.1}))


@pytest.mark.parametrize(
    "name,cls", [("adamw", torch.optim.AdamW), ("adam", torch.optim.Adam), ("radam", torch.optim.RAdam), ("AdamW", torch.optim.AdamW)]
)
def test_build_optimizer(name, cls):
    model = Tiny()
    config = OptimConfig(name=name, lr=3e-4, weight_decay=0.02, betas=(0.8, 0.98), eps=1e-7)
    opt = build_optimizer(model, config)
    assert type(opt) is cls
    assert [g["weight_decay"] for g in opt.param_groups] == [0.02, 0.0]
    assert all(g["lr"] == 3e-4 and g["betas"] == (0.8, 0.98) and g["eps"] == 1e-7 for g in opt.param_groups)
    plain = build_optimizer(model.proj.parameters(), config)
    assert plain.param_groups[0]["weight_decay"] == 0.02


def test_build_optimizer_unknown_name():
    with pytest.raises(ConfigError, match=r"optim.name.*'sgd'.*adamw"):
        build_optimizer(Tiny(), OptimConfig(name="sgd"))


def test_optimizer_and_scheduler_together():
    model = nn.Linear(2, 1)
    opt = build_optimizer(model, OptimConfig(lr=0.1))
    sched = build_scheduler(opt, ScheduleConfig(warmup_steps=2), 0)
    seen = []
    for _ in range(3):
        seen.append(opt.param_groups[0]["lr"])
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    assert seen == pytest.approx([0.0, 0.05, 0.1])


@pytest.mark.parametrize("name,fused", [("adamw", True), ("adam", True), ("radam", None)])
def test_adam_and_adamw_run_fused_and_take_the_same_steps(name, fused):
    """Adam / AdamW use torch's fused kernel; their updates equal the per-tensor form within round-off."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4))
    reference = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4))
    reference.load_state_dict(model.state_dict())
    start = [p.clone() for p in model.state_dict().values()]
    config = OptimConfig(name=name, lr=1e-2, weight_decay=0.01)
    ours = build_optimizer(model, config)
    assert ours.defaults.get("fused") == fused
    plain = type(ours)(param_groups(reference, 0.01, 1e-2), lr=1e-2, weight_decay=0.01, foreach=False)
    for step in range(5):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step))
        for net, opt in ((model, ours), (reference, plain)):
            opt.zero_grad()
            net(x).pow(2).mean().backward()
            opt.step()
    worst = max(float((a - b).abs().max()) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))
    assert worst < 1e-6
    moved = max(float((a - b).abs().max()) for a, b in zip(model.state_dict().values(), start))
    assert moved > 1e-3  # the five steps did move the weights
