"""Issue 14 item 4: the object ``compile()`` returns for a module behaves like the module.

Each case builds a module and its eager twin (a deep copy made before compiling),
does the same thing to both -- set or delete an attribute, switch train/eval,
register hooks, convert, load state -- and compares the compiled object with the
twin on fresh inputs: outputs, gradients, state, and what the hooks saw.
"""

import copy

import pytest
import torch
from torch import nn
from torch.nn.modules import module as nn_module

import torchkiln

BACKENDS = ["eager", "aot_eager"]


@pytest.fixture(autouse=True)
def fresh_caches():
    torchkiln.reset()
    yield
    torchkiln.reset()


class Net(nn.Module):
    scale = 1.0  # the class default that deleting the instance attribute falls back to

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)
        self.register_buffer("shift", torch.zeros(4))
        self.scale = 2.0
        self.offset = torch.zeros(4)  # a plain tensor attribute: neither parameter nor buffer
        self.head = None  # an optional submodule, set later
        self.temperature = 1.0  # replaced by a parameter later

    def forward(self, x):
        y = self.norm(self.fc(x)) * self.scale + self.shift + self.offset
        if self.head is not None:
            y = self.head(y)
        if self.training:
            y = y * 0.5
        return y / self.temperature


def compiled_and_twin(backend, mod=None):
    mod = Net() if mod is None else mod
    twin = copy.deepcopy(mod)
    return torchkiln.compile(mod, backend=backend), twin


def assert_same_call(cm, twin, dtype=torch.float32):
    """One fresh input through both: outputs, input and parameter gradients, state."""
    x = torch.randn(3, 4, dtype=dtype, requires_grad=True)
    x_twin = x.detach().clone().requires_grad_()
    out, expected = cm(x), twin(x_twin)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(x.grad, x_twin.grad)
    for (name, p), q in zip(cm._orig_mod.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=f"gradient of {name}")
    torch.testing.assert_close(cm._orig_mod.state_dict(), twin.state_dict())


@pytest.mark.parametrize("backend", BACKENDS)
def test_setting_and_deleting_attributes_on_the_compiled_object_changes_the_original(backend):
    cm, twin = compiled_and_twin(backend)
    m = cm._orig_mod
    assert_same_call(cm, twin)
    offset = torch.randn(4)
    cm.scale, twin.scale = 3.0, 3.0
    cm.offset, twin.offset = offset, offset.clone()
    assert m.scale == 3.0 and m.offset is offset and cm.scale == 3.0
    assert_same_call(cm, twin)
    del cm.scale, twin.scale
    assert "scale" not in vars(m) and cm.scale == 1.0
    assert_same_call(cm, twin)


@pytest.mark.parametrize("backend", BACKENDS)
def test_setting_a_submodule_parameter_or_buffer_on_the_compiled_object_changes_the_original(
    backend,
):
    cm, twin = compiled_and_twin(backend)
    m = cm._orig_mod
    assert_same_call(cm, twin)
    head, temperature, shift = nn.Linear(4, 4), nn.Parameter(torch.tensor(2.0)), torch.randn(4)
    cm.head, twin.head = head, copy.deepcopy(head)
    cm.temperature, twin.temperature = temperature, copy.deepcopy(temperature)
    cm.shift, twin.shift = shift, shift.clone()
    assert m.head is head and m.temperature is temperature and m.shift is shift
    assert "head" in m._modules and "temperature" in m._parameters
    assert_same_call(cm, twin)


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_flag_is_the_originals(backend):
    cm, twin = compiled_and_twin(backend)
    m = cm._orig_mod
    assert_same_call(cm, twin)
    cm.training, twin.training = False, False
    assert not m.training and m.norm.training
    assert_same_call(cm, twin)
    assert cm.train() is cm and twin.train() is twin
    assert m.training and m.norm.training
    assert_same_call(cm, twin)
    m.eval()
    twin.eval()
    assert not cm.training and not m.norm.training
    assert_same_call(cm, twin)
    assert cm.train().eval() is cm and not m.training


def test_replacing_forward_on_the_compiled_object_replaces_the_originals():
    cm, twin = compiled_and_twin("eager")
    m = cm._orig_mod
    assert_same_call(cm, twin)
    cm.forward = m.fc.forward
    twin.forward = twin.fc.forward
    assert_same_call(cm, twin)
    torch.testing.assert_close(m(torch.ones(3, 4)), twin(torch.ones(3, 4)))
    del cm.forward, twin.forward
    assert_same_call(cm, twin)


def test_replacing_forward_on_the_original_module_recompiles():
    cm, twin = compiled_and_twin("eager")
    m = cm._orig_mod
    assert_same_call(cm, twin)
    m.forward = m.fc.forward
    twin.forward = twin.fc.forward
    assert_same_call(cm, twin)
    del m.forward, twin.forward
    assert_same_call(cm, twin)


# Hooks: each returns a replacement, so a hook that is skipped or whose result is
# dropped shows in the outputs or gradients; each logs (hook, module) it was called with.
def _hooks(log):
    def note(name, result):
        return lambda mod, *args: log.append((name, mod)) or result(*args)

    return {
        "forward_pre": ("register_forward_pre_hook", note("pre", lambda args: (args[0] * 2,)), {}),
        "forward_pre_kwargs": (
            "register_forward_pre_hook",
            note("pre_kw", lambda args, kwargs: ((args[0] + 1,), kwargs)),
            {"with_kwargs": True},
        ),
        "forward": ("register_forward_hook", note("fwd", lambda args, out: out * 3), {}),
        "forward_kwargs": (
            "register_forward_hook",
            note("fwd_kw", lambda args, kwargs, out: out - args[0].sum()),
            {"with_kwargs": True},
        ),
        "forward_always_call": (
            "register_forward_hook",
            note("always", lambda args, out: out + 1),
            {"always_call": True},
        ),
        "full_backward": (
            "register_full_backward_hook",
            note("bwd", lambda grad_in, grad_out: tuple(g * 3 for g in grad_in)),
            {},
        ),
        "backward_pre": (
            "register_full_backward_pre_hook",
            note("bwd_pre", lambda grad_out: tuple(g * 2 for g in grad_out)),
            {},
        ),
    }


#: Global hooks: how to register one, and which module hook above it is.
_GLOBAL_HOOKS = {
    "global_forward_pre": (nn_module.register_module_forward_pre_hook, "forward_pre"),
    "global_forward": (nn_module.register_module_forward_hook, "forward"),
    "global_full_backward": (nn_module.register_module_full_backward_hook, "full_backward"),
}


def _register(kind, owners, log):
    """Register hook ``kind`` on each of ``owners`` (a global hook once); return the handles."""
    if kind in _GLOBAL_HOOKS:
        register, hook = _GLOBAL_HOOKS[kind]
        return [register(_hooks(log)[hook][1])]
    method, hook, options = _hooks(log)[kind]
    return [getattr(owner, method)(hook, **options) for owner in owners]


def check_hooked_calls(cm, twin, log, calls=2):
    """Compiled and eager calls give the same outputs and gradients, and the same hooks
    ran in the same order on the corresponding modules (the original, not the wrapper)."""
    for _ in range(calls):
        x = torch.randn(3, 4)
        seen = []
        for obj, root in ((cm, cm._orig_mod), (twin, twin)):
            log.clear()
            inp = x.clone().requires_grad_()
            out = obj(inp)
            out.sum().backward()
            paths = {id(mod): name or "<root>" for name, mod in root.named_modules()}
            hooks = [(name, paths.get(id(mod), repr(mod))) for name, mod in log]
            seen.append((out, inp.grad, [p.grad.clone() for p in root.parameters()], hooks))
        (out, grad, param_grads, hooks), (e_out, e_grad, e_param_grads, e_hooks) = seen
        torch.testing.assert_close(out, e_out)
        torch.testing.assert_close(grad, e_grad)
        torch.testing.assert_close(param_grads, e_param_grads)
        assert hooks == e_hooks and hooks


HOOK_KINDS = [*_hooks([]), *_GLOBAL_HOOKS]


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = 2.0

    def forward(self, x):
        return self.fc(x) * self.scale


def check_hooks(kind, when, backend, owner=lambda mod: mod):
    """Hook ``kind`` on ``owner(module)`` and on its eager twin's: registered before
    compiling, or after a compiled call; then compiled and eager calls agree and,
    once the hooks are removed, agree again."""
    log, handles = [], []
    m = Small()
    try:
        if when == "before compiling":
            twin = copy.deepcopy(m)
            handles = _register(kind, [owner(m), owner(twin)], log)
            cm = torchkiln.compile(m, backend=backend)
        else:
            cm, twin = compiled_and_twin(backend, m)
            assert_same_call(cm, twin)
            handles = _register(kind, [owner(m), owner(twin)], log)
        check_hooked_calls(cm, twin, log)
    finally:
        for handle in handles:
            handle.remove()
    assert_same_call(cm, twin)


@pytest.mark.parametrize("when", ["before compiling", "after a compiled call"])
@pytest.mark.parametrize("kind", HOOK_KINDS)
def test_hooks_on_the_original_run_as_in_eager(kind, when):
    check_hooks(kind, when, "eager")


@pytest.mark.parametrize("kind", ["full_backward", "backward_pre", *_GLOBAL_HOOKS])
def test_hooks_on_the_original_run_as_in_eager_under_aot_eager(kind):
    """Backward hooks wrap the compiled forward's inputs and outputs in autograd functions;
    global hooks must not see the GraphModules the AOT layer runs while it compiles."""
    check_hooks(kind, "after a compiled call", "aot_eager")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["full_backward", "backward_pre", *_GLOBAL_HOOKS])
def test_hooks_added_to_a_submodule_after_a_compiled_call_run(kind, backend):
    """The capture inlines a submodule's forward only while calling it runs no hook:
    one added later, of any kind, recompiles."""
    check_hooks(kind, "after a compiled call", backend, owner=lambda mod: mod.fc)


@pytest.mark.parametrize("kind", list(_hooks([])))
def test_hooks_registered_on_the_compiled_object_land_on_the_original(kind):
    log = []
    cm, twin = compiled_and_twin("eager", Small())
    assert_same_call(cm, twin)
    handles = _register(kind, [cm, twin], log)
    check_hooked_calls(cm, twin, log)
    for handle in handles:
        handle.remove()
    assert_same_call(cm, twin)


def test_always_call_forward_hook_runs_when_forward_raises():
    log = []
    cm, twin = compiled_and_twin("eager", nn.Linear(4, 4))
    for owner in (cm._orig_mod, twin):
        owner.register_forward_hook(lambda mod, args, out: log.append(mod), always_call=True)
    for obj in (cm, twin):
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            obj(torch.randn(3, 5))
    assert log == [cm._orig_mod, twin]


def test_attributes_and_hooks_under_inductor():
    log = []
    cm, twin = compiled_and_twin("inductor", Small())
    assert_same_call(cm, twin)
    cm.scale, twin.scale = 3.0, 3.0
    _register("forward_pre", [cm._orig_mod, twin], log)
    _register("full_backward", [cm._orig_mod.fc, twin.fc], log)
    check_hooked_calls(cm, twin, log, calls=1)


class Cached(nn.Module):
    """Keeps a tensor derived from its weight that ``_apply`` refreshes, as ``nn.RNNBase``
    keeps its flat weights, and a step count as its state dict's extra state."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.weight_t = self.weight.detach().t().clone()
        self.steps = 0

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        self.weight_t = self.weight.detach().t().clone()
        return self

    def get_extra_state(self):
        return {"steps": self.steps}

    def set_extra_state(self, state):
        self.steps = state["steps"]

    def forward(self, x):
        return x @ self.weight_t + self.weight.sum() + self.steps


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_dict_and_conversions_run_on_the_original(backend):
    cm, twin = compiled_and_twin(backend, Cached())
    m = cm._orig_mod
    assert_same_call(cm, twin)
    assert list(cm.state_dict()) == list(m.state_dict()) == ["weight", "_extra_state"]
    state = {"weight": torch.randn(4, 4), "_extra_state": {"steps": 3}}
    cm.load_state_dict(state)
    twin.load_state_dict(copy.deepcopy(state))
    assert m.steps == 3
    assert_same_call(cm, twin)
    assert cm.to(torch.float64) is cm and twin.to(torch.float64) is twin
    assert m.weight_t.dtype == torch.float64
    assert_same_call(cm, twin, dtype=torch.float64)
    assert [(n, p) for n, p in cm.named_parameters()] == [("weight", m.weight)]
    assert list(cm.parameters()) == [m.weight]
    cm.zero_grad()
    assert m.weight.grad is None


def test_a_compiled_module_inside_a_parent_follows_the_parent():
    cm, twin = compiled_and_twin("eager", Cached())
    parent, twin_parent = nn.Sequential(cm), nn.Sequential(twin)
    assert_same_call(cm, twin)
    assert list(parent.state_dict()) == ["0.weight", "0._extra_state"]
    state = {"0.weight": torch.randn(4, 4), "0._extra_state": {"steps": 2}}
    parent.load_state_dict(state)
    twin_parent.load_state_dict(copy.deepcopy(state))
    parent.to(torch.float64)
    twin_parent.to(torch.float64)
    assert cm.steps == 2 and cm.weight_t.dtype == torch.float64
    assert_same_call(cm, twin, dtype=torch.float64)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_moves_the_original():
    cm, twin = compiled_and_twin("eager", Cached())
    assert cm.cuda() is cm and twin.cuda() is twin
    assert cm._orig_mod.weight_t.is_cuda
    x = torch.randn(3, 4, device="cuda")
    torch.testing.assert_close(cm(x), twin(x))


def test_apply_and_modules_see_the_original():
    def init(mod):
        if isinstance(mod, nn.Linear):
            nn.init.constant_(mod.weight, 0.5)

    lin = nn.Linear(4, 4)
    cm, twin = compiled_and_twin("eager", lin)
    assert cm.apply(init) is cm and twin.apply(init) is twin
    assert list(cm.modules()) == [lin] and list(cm.named_modules()) == [("", lin)]
    assert_same_call(cm, twin)


def test_the_compiled_object_is_a_module_that_shows_the_original():
    m = Net()
    cm = torchkiln.compile(m, backend="eager")
    assert isinstance(cm, nn.Module) and cm._orig_mod is m
    assert repr(cm) == f"CompiledModule({m!r})"
    assert {"scale", "offset", "fc", "forward", "state_dict"} <= set(dir(cm))
    with pytest.raises(TypeError, match="already compiled by torchkiln"):
        cm.compile()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_copy_runs_a_forward_compiled_for_its_own_module(backend):
    cm, twin = compiled_and_twin(backend)
    assert_same_call(cm, twin)
    for copy_of in (copy.copy, copy.deepcopy):
        cm_copy, twin_copy = copy_of(cm), copy_of(twin)
        assert type(cm_copy) is type(cm)
        if copy_of is copy.deepcopy:
            assert cm_copy._orig_mod is not cm._orig_mod
            cm_copy.scale, twin_copy.scale = 5.0, 5.0
            with torch.no_grad():
                cm_copy.fc.weight.mul_(-1)
                twin_copy.fc.weight.mul_(-1)
        assert_same_call(cm_copy, twin_copy)
        assert_same_call(cm, twin)
