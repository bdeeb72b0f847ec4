"""Scopes, modes and coverage meters are local to the thread and asyncio task that entered them: two threads
running emulated models at once each get their own method (bit for bit their single-threaded results), a meter
counts its own thread's products, two tasks holding different emulation_modes across awaits keep theirs, and a
backward run in another thread counts for its forward's meter."""

import asyncio
import copy
import threading

import pytest
import torch
from torch import nn

import tcemu

TIMEOUT = 60  # seconds: a thread stuck at a rendezvous fails the test instead of hanging the suite


class Gate(nn.Module):
    """Calls ``wait`` (if set) in its forward: where a test makes two threads meet."""

    def __init__(self):
        super().__init__()
        self.wait = None

    def forward(self, x):
        if self.wait is not None:
            self.wait()
        return x


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(32, 32) / 6)
        self.gate = Gate()

    def forward(self, h):
        h = self.gate(h)
        return torch.tanh(h @ self.w)


class Net(nn.Module):
    """Functional products only (torch.matmul, einsum): what the scopes of emulate_ emulate."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(16, 32) / 4)
        self.w2 = nn.Parameter(torch.randn(32, 8) / 6)
        self.gate = Gate()
        self.inner = Inner()

    def forward(self, x):
        h = torch.tanh(torch.matmul(x, self.w1))
        h = self.gate(h)
        h = self.inner(h)
        return torch.einsum("ij,jk->ik", h, self.w2)


def _net(seed=0):
    torch.manual_seed(seed)
    return Net()


def _run(model, x):
    """Output, input gradient and coverage summary of one forward and backward."""
    x = x.clone().requires_grad_(True)
    with tcemu.coverage() as cov:
        y = model(x)
        (g,) = torch.autograd.grad(y.square().sum(), x)
    return y.detach(), g, cov.summary()


def _in_threads(*jobs):
    """Run each job in its own thread; re-raise the first exception; return their results."""
    results, errors = [None] * len(jobs), []

    def target(i, job):
        try:
            results[i] = job()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    if errors:
        raise errors[0]
    return results


def _assert_same(got, want):
    (y, g, cov), (y0, g0, cov0) = got, want
    assert torch.equal(y, y0) and torch.equal(g, g0)
    assert cov == cov0


X = torch.randn(12, 16, generator=torch.Generator().manual_seed(1))


def test_one_emulated_model_in_two_threads_at_once_is_emulated_in_both():
    """Both threads are inside the model's scope at once (they meet at a barrier in its forward): the second
    must not take the first's scope for its own (and run its products in plain FP32)."""
    model = tcemu.emulate_(_net(), "bf16x3")
    x2 = X.flip(0)
    want = [_run(model, X), _run(model, x2)]
    assert want[0][2]["fraction"] == 1.0
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    model.gate.wait = barrier.wait
    got = _in_threads(lambda: _run(model, X), lambda: _run(model, x2))
    for g, w in zip(got, want):
        _assert_same(g, w)


def test_two_threads_with_different_methods_and_left_out_modules_keep_their_own():
    """Thread A runs a bf16x3 model whose ``inner`` is left out (filter_fn: plain FP32 there), thread B a
    tf32x3 model, a third thread the plain model; B's products run while A is inside its left-out module.
    Each gives its single-threaded results bit for bit, and each thread's meter counts its own products."""
    model_a = tcemu.emulate_(_net(), "bf16x3", lambda m, fqn: not fqn.startswith("inner"))
    model_b = tcemu.emulate_(_net(), "tf32x3")
    plain = _net()
    want = [_run(model_a, X), _run(model_b, X), _run(plain, X)]
    assert 0 < want[0][2]["fraction"] < 1 and want[1][2]["fraction"] == 1.0 and want[2][2]["fraction"] == 0.0
    a_inside, b_done = threading.Event(), threading.Event()

    def a_waits():
        a_inside.set()
        assert b_done.wait(TIMEOUT)

    def b_waits():
        assert a_inside.wait(TIMEOUT)

    def run_b():
        try:
            return _run(model_b, X)
        finally:
            b_done.set()

    model_a.inner.gate.wait = a_waits
    model_b.gate.wait = b_waits
    plain.gate.wait = b_waits
    got = _in_threads(lambda: _run(model_a, X), run_b, lambda: _run(plain, X))
    for g, w in zip(got, want):
        _assert_same(g, w)


def test_a_meter_does_not_count_another_threads_products():
    model = tcemu.emulate_(_net(), "tf32x3")
    started, done = threading.Event(), threading.Event()

    def measure_nothing():
        with tcemu.coverage() as cov:
            started.set()
            assert done.wait(TIMEOUT)
        return cov.summary()

    def work():
        assert started.wait(TIMEOUT)
        try:
            return _run(model, X)
        finally:
            done.set()

    idle, busy = _in_threads(measure_nothing, work)
    assert idle["emulated_flops"] == idle["fp32_flops"] == 0 and idle["forward_flops"] == 0
    _assert_same(busy, _run(model, X))


def test_backward_in_another_thread_counts_for_its_forwards_meter_only():
    """Forward in thread A inside its meter, backward in thread B (no meter), while thread C measures something
    else: B's emulated gradient products count for A's meter (the forward's), none for C's; the gradients are the
    single-threaded ones bit for bit."""
    model = tcemu.emulate_(_net(), "bf16x6")
    x = X.clone().requires_grad_(True)
    with tcemu.coverage() as cov0:
        (g0,) = torch.autograd.grad(model(x).square().sum(), x)
    want_bwd = cov0.flops("emulated", "backward")
    assert want_bwd > 0
    forward_done, backward_done, c_started = threading.Event(), threading.Event(), threading.Event()
    box = {}

    def forward():
        assert c_started.wait(TIMEOUT)
        with tcemu.coverage() as cov:
            box["y"] = model(x)
            forward_done.set()
            assert backward_done.wait(TIMEOUT)
        return cov

    def backward():
        assert forward_done.wait(TIMEOUT)
        try:
            return torch.autograd.grad(box["y"].square().sum(), x)[0]
        finally:
            backward_done.set()

    def other():
        with tcemu.coverage() as cov:
            c_started.set()
            assert backward_done.wait(TIMEOUT)
        return cov

    cov_a, g, cov_c = _in_threads(forward, backward, other)
    assert torch.equal(g, g0)
    assert cov_a.flops("emulated", "backward") == want_bwd
    assert cov_a.flops("emulated", "forward") == cov0.flops("emulated", "forward")
    assert cov_c.flops() == 0 and not cov_c.rows


def test_two_asyncio_tasks_keep_their_own_emulation_mode_across_awaits():
    """Task 1 enters bf16x3, task 2 enters tf32x3 while task 1 waits, task 1 computes and leaves while task 2
    waits, then task 2 computes; a third task without a mode computes between them. Each gets its own method."""
    torch.manual_seed(3)
    a, b = torch.randn(24, 40), torch.randn(40, 16)

    async def main():
        one_in, two_in, one_out = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def task1():
            with tcemu.emulation_mode("bf16x3"):
                one_in.set()
                await two_in.wait()
                y = torch.matmul(a, b)
                z = torch.einsum("ik,kj->ij", a, b)
            one_out.set()
            return y, z

        async def task2():
            await one_in.wait()
            with tcemu.emulation_mode("tf32x3"):
                two_in.set()
                await one_out.wait()
                await asyncio.sleep(0)
                return torch.matmul(a, b), torch.einsum("ik,kj->ij", a, b)

        async def plain():
            await two_in.wait()
            return torch.matmul(a, b)

        return await asyncio.wait_for(asyncio.gather(task1(), task2(), plain()), TIMEOUT)

    (y1, z1), (y2, z2), y3 = asyncio.run(main())
    for y, method in ((y1, "bf16x3"), (z1, "bf16x3"), (y2, "tf32x3"), (z2, "tf32x3")):
        assert torch.equal(y, tcemu.matmul(a, b, method)), method
    assert torch.equal(y3, torch.matmul(a, b))
    assert torch._C._len_torch_function_stack() == 0


def test_two_asyncio_tasks_keep_their_own_meters_across_awaits():
    """Task 1 opens a meter, task 2 opens one while task 1 waits, task 1 runs an emulated model and closes its
    meter while task 2 waits, then task 2 runs a plain product: each meter counts its own task's products."""
    model = tcemu.emulate_(_net(), "bf16x3")
    torch.manual_seed(6)
    a, b = torch.randn(24, 40), torch.randn(40, 16)
    want1 = _run(model, X)[2]

    async def main():
        one_in, two_in, one_out = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def task1():
            with tcemu.coverage() as cov:
                one_in.set()
                await two_in.wait()
                y = model(X.clone().requires_grad_(True))
                torch.autograd.grad(y.square().sum(), model.w1)
            one_out.set()
            return cov

        async def task2():
            await one_in.wait()
            with tcemu.coverage() as cov:
                two_in.set()
                await one_out.wait()
                torch.matmul(a, b)
            return cov

        return await asyncio.wait_for(asyncio.gather(task1(), task2()), TIMEOUT)

    cov1, cov2 = asyncio.run(main())
    assert cov1.flops("emulated", "forward") == want1["forward_flops"] and cov1.flops("fp32") == 0
    assert cov2.flops("fp32") == 2 * 24 * 40 * 16 and cov2.flops("emulated") == 0
    assert torch._C._len_torch_dispatch_stack() == 0 and torch._C._len_torch_function_stack() == 0


def test_a_thread_started_inside_a_mode_runs_plain():
    """torch's mode stack is per thread: a mode entered in one thread is not seen by another, and a thread does
    not see it through a context copied from it either (the scopes of an emulated model still apply there)."""
    import contextvars

    torch.manual_seed(4)
    a, b = torch.randn(8, 24), torch.randn(24, 8)
    model = tcemu.emulate_(_net(), "bf16x3")
    want = _run(model, X)
    with tcemu.emulation_mode("bf16x3"):
        ctx1, ctx2 = contextvars.copy_context(), contextvars.copy_context()  # (a context runs in one thread)
        plain, copied, emulated = _in_threads(lambda: torch.matmul(a, b), lambda: ctx1.run(torch.matmul, a, b),
                                              lambda: ctx2.run(_run, model, X))
    assert torch.equal(plain, torch.matmul(a, b)) and torch.equal(copied, plain)
    _assert_same(emulated, want)


def test_nested_modes_of_one_task_still_compose():
    """An attention-only mode inside a matmul mode: the inner one leaves the matmul to the outer one."""
    torch.manual_seed(5)
    a, b = torch.randn(8, 24), torch.randn(24, 8)
    with tcemu.emulation_mode("tf32x3"), tcemu.emulation_mode("bf16x3", attention=True, matmuls=False):
        c = torch.matmul(a, b)
    assert torch.equal(c, tcemu.matmul(a, b, "tf32x3"))


def test_a_submodule_compiled_inside_an_eager_scope_gives_the_eager_result():
    """While compiling, the scopes read the eager state once (Dynamo cannot trace a ContextVar)."""
    model = tcemu.emulate_(_net(), "bf16x3")
    want = model(X)
    model.inner.compile(backend="eager", fullgraph=True)
    try:
        assert torch.equal(model(X), want)
    finally:
        torch.compiler.reset()


@pytest.mark.gpu
def test_threads_with_cuda_backward_keep_their_settings_and_meters():
    """On CUDA autograd runs the backward on threads of its own: each thread's backward still runs under its
    forward's configuration (one thread without the small-shape fallback, one with) and counts for its own meter
    only, with the single-threaded results bit for bit."""
    model = tcemu.emulate_(copy.deepcopy(_net()).cuda(), "tf32x3")
    x = X.cuda()

    def job(fallback):
        with tcemu.config(small_shape_fallback=fallback):
            return _run(model, x)

    want = [job(False), job(True)]
    assert want[0][2]["emulated_flops"] > 0 and want[0][2]["backward_flops"] > 0
    assert want[1][2]["fallback_flops"] > 0 and want[1][2]["emulated_flops"] == 0
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    model.gate.wait = barrier.wait
    for _ in range(3):
        got = _in_threads(lambda: job(False), lambda: job(True))
        for g, w in zip(got, want):
            _assert_same(g, w)
