"""The dense parameters' Adam stepped through Paddle's merged kernel directly is its step(),
bit for bit, over many steps and a rate change; anything but the plain case is left to it."""

from typing import Any

import numpy as np

from recrunner.runtime import import_paddle
from recrunner.train.optim import merged_step

paddle = import_paddle()


def net_and_adam(seed: int = 4) -> tuple:
    paddle.seed(seed)
    net = paddle.nn.Sequential(paddle.nn.Linear(13, 32), paddle.nn.ReLU(),
                               paddle.nn.Linear(32, 8), paddle.nn.ReLU(), paddle.nn.Linear(8, 1))
    return net, paddle.optimizer.Adam(learning_rate=0.01, parameters=net.parameters(),
                                      use_multi_tensor=True)


def backward(net: Any, step: int) -> None:
    rng = np.random.default_rng(step)
    x = paddle.to_tensor(rng.standard_normal((64, 13)).astype(np.float32))
    y = paddle.to_tensor(rng.random((64, 1)).astype(np.float32))
    paddle.nn.functional.binary_cross_entropy_with_logits(net(x), y).backward()


def test_the_direct_merged_step_is_adams_step_bit_for_bit() -> None:
    (a, adam_a), (b, adam_b) = net_and_adam(), net_and_adam()
    direct = 0
    for step in range(30):
        if step == 15:  # an epoch's decayed rate
            adam_a.set_lr(0.001)
            adam_b.set_lr(0.001)
        for net, adam, fast in ((a, adam_a, False), (b, adam_b, True)):
            backward(net, step)
            if fast and merged_step(adam):
                direct += 1
            else:
                adam.step()
            adam.clear_grad()
    assert direct == 29  # every step after the first, which makes Adam's lists
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        np.testing.assert_array_equal(pa.numpy(), pb.numpy())
    sa, sb = adam_a.state_dict(), adam_b.state_dict()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):  # the nets' own names
        for suffix in ("_moment1_0", "_moment2_0", "_beta1_pow_acc_0", "_beta2_pow_acc_0"):
            np.testing.assert_array_equal(sa[pa.name + suffix].numpy(),
                                          sb[pb.name + suffix].numpy(), err_msg=suffix)
    assert not np.array_equal(a[0].weight.numpy(), net_and_adam()[0][0].weight.numpy())


def test_other_cases_are_left_to_adams_own_step() -> None:
    net, adam = net_and_adam()
    backward(net, 0)
    assert not merged_step(adam)  # before the first step made its lists
    adam.step()
    adam.clear_grad()
    net[0].weight.optimize_attr["learning_rate"] = 2.0  # a parameter with its own rate
    backward(net, 1)
    assert not merged_step(adam)
    net[0].weight.optimize_attr["learning_rate"] = 1.0
    net[4].weight.clear_gradient(False)  # a parameter without a gradient this step
    assert not merged_step(adam)
