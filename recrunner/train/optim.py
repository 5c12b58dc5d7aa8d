"""The training optimizer: Adam, lazy on sparse-gradient tables and fused on everything else."""

from collections.abc import Mapping
from typing import Any

from recrunner.config.runner import RunnerConfig
from recrunner.errors import RecrunnerError
from recrunner.train.row_adam import MergeRows, RowAdam

# Adam's moments' decay rates and epsilon (Paddle's defaults), for both parts and for mode=ps's
# servers (recrunner/fleet/ps_tables.py).
BETA1, BETA2, EPSILON = 0.9, 0.999, 1e-8
# Each part's rate factor per epoch when runner.lr_decay and table_lr_decay are unset (docs/
# models.md, issue 28). At constant rates every embedding model lost AUC in epoch 2: its MLP
# fits the rows it saw in epoch 1 (freezing the tables alone still lost 0.001-0.007). The
# dense part nearly stops after epoch 1; the tables go on learning, at a tenth of their rate.
DEFAULT_DECAYS = {"dense": 0.01, "tables": 0.1}


def epoch_decays(runner: RunnerConfig) -> dict[str, float]:
    """Each part's rate factor per epoch (see RunnerConfig.lr_decay). Online passes keep their
    rates: a pass is new data, not a repeat of the last."""
    default = {"dense": 1.0, "tables": 1.0} if runner.online else DEFAULT_DECAYS
    dense = default["dense"] if runner.lr_decay is None else runner.lr_decay
    tables = runner.table_lr_decay if runner.table_lr_decay is not None else \
        default["tables"] if runner.lr_decay is None else runner.lr_decay
    return {"dense": dense, "tables": tables}


def table_layers(paddle: Any, net: Any) -> list[Any]:
    """The net's embedding tables with sparse gradients."""
    return [layer for layer in net.sublayers()
            if isinstance(layer, paddle.nn.Embedding) and layer._sparse]


def host_table_layers(paddle: Any, net: Any) -> list[Any]:
    """The net's embedding tables with sparse gradients when every one of them can be updated
    on the host (blocks.IdTable's `host_rows`); else none (Paddle's lazy Adam for all)."""
    layers = table_layers(paddle, net)
    return layers if all(hasattr(layer, "host_rows") for layer in layers) else []


class Adam:
    """Adam over all of a net's parameters in two parts: a lazy one for the embedding tables
    with sparse gradients, which updates only the rows a batch touched, and one multi-tensor
    update for the dense parameters, which on the CPU costs one kernel launch instead of one
    per parameter (W&D: 3.8 -> 2.9 ms a step).

    The tables' part is Paddle's lazy Adam on SelectedRows gradients, or, with `host_tables`,
    recrunner.train.row_adam.RowAdam on the rows themselves (`merge_rows`: how the ranks of a
    data-parallel group combine their rows first; None for a process alone)."""

    def __init__(self, paddle: Any, net: Any, learning_rate: float,
                 table_learning_rate: float | None = None,
                 decays: Mapping[str, float] | None = None, *, host_tables: bool = False,
                 merge_rows: MergeRows | None = None) -> None:
        # Each part's rate before decay, and its decay: start_epoch sets the decayed rate.
        self.rates = {"tables": table_learning_rate or learning_rate, "dense": learning_rate}
        self.decays = {"dense": 1.0, "tables": 1.0, **(decays or {})}
        tables = [layer.weight for layer in table_layers(paddle, net)]
        dense = [p for p in net.parameters() if all(p is not t for t in tables)]
        hosted = host_table_layers(paddle, net) if host_tables else []
        self.parts: dict[str, Any] = {}
        if hosted:
            self.parts["tables"] = RowAdam(hosted, self.rates["tables"], BETA1, BETA2, EPSILON,
                                           merge_rows)
        elif tables:
            self.parts["tables"] = paddle.optimizer.Adam(
                learning_rate=self.rates["tables"], parameters=tables, lazy_mode=True, beta1=BETA1,
                beta2=BETA2, epsilon=EPSILON)
        if dense:
            self.parts["dense"] = paddle.optimizer.Adam(
                learning_rate=learning_rate, parameters=dense, use_multi_tensor=True, beta1=BETA1,
                beta2=BETA2, epsilon=EPSILON)

    def start_epoch(self, epoch: int) -> None:
        """Epoch `epoch` (1-based) trains at each part's rate * decay^(epoch - 1): set here,
        not kept in the state, so a resumed run gets the same rate as an uninterrupted one."""
        for name, opt in self.parts.items():
            opt.set_lr(self.rates[name] * self.decays[name] ** (epoch - 1))

    def step(self) -> None:
        """Apply the gradients, then clear them for the next backward pass."""
        for name, opt in self.parts.items():
            if not (name == "dense" and merged_step(opt)):
                opt.step()
            opt.clear_grad()

    def state_dict(self) -> dict[str, dict]:
        return {name: opt.state_dict() for name, opt in self.parts.items()}

    def set_state_dict(self, state: dict[str, dict]) -> None:
        if set(state) != set(self.parts):
            raise RecrunnerError(f"checkpoint optimizer state holds parts {sorted(state)[:4]}, "
                                 f"this model needs {sorted(self.parts)}")
        for name, opt in self.parts.items():
            opt.set_state_dict(state[name])


# Paddle 3.0's multi-tensor Adam keeps its parameters, moments and beta powers in lists per
# dtype once its first step has made them; its step() then rebuilds the gradient and rate
# lists through ~0.5 ms of Python a W&D step (1.02 vs 0.53 ms, same process) before calling
# the merged kernel.
_MERGED = "FP32_LODTensor"


def merged_step(opt: Any) -> bool:
    """One step of Paddle's multi-tensor Adam `opt` through its merged kernel, as its step()
    makes it (bit for bit: tests/test_optim.py), when its state is the plain case this
    project builds: float32 parameters with gradients, one rate, no AMSGrad, no master
    weights. False: not that case (or no step taken yet), and nothing was done."""
    from paddle import _C_ops

    try:
        params = opt._param_dict[_MERGED][0]
        moments = opt._moment1_dict[_MERGED][0], opt._moment2_dict[_MERGED][0]
        pows = opt._beta1_pow_acc_dict[_MERGED][0], opt._beta2_pow_acc_dict[_MERGED][0]
    except (AttributeError, KeyError, IndexError):
        return False
    plain = (not opt._amsgrad and not opt._multi_precision
             and isinstance(opt._beta1, float) and isinstance(opt._beta2, float))
    if (not plain or not params or len(params) != len(opt._parameter_list)
            or any(p.grad is None or p.optimize_attr.get("learning_rate", 1.0) != 1.0
                   for p in params)):
        return False
    rate = opt._global_learning_rate()
    run: Any = getattr(_C_ops, "merged_adam_")  # noqa: B009 (not in Paddle's stubs)
    run(params, [p.grad for p in params], [rate] * len(params), *moments, None, *pows, None,
        opt._beta1, opt._beta2, opt._epsilon, False, False, False)
    return True
