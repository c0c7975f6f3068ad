"""SGD that updates only the part of each weight a step used (a recipe's ``optimizer.update: used``).

torch's SGD updates every element of every parameter that has a gradient: a supernet whose step ran a small
subnet still pays the momentum and weight-decay update over each active weight's full-size tensor, the
part of its step a static model of that subnet does not have (`bench.elastic_overhead`: the ResNet
family's ``update_ms``). Where a supernet's ops record which leading region of a weight the step's forwards
used (modules with ``take_used_regions``: the ResNet family's, through `ofa.families.corner_grad`; every
rank runs the same subnets, so the ranks agree), this optimizer takes torch's SGD update on that region
alone; the rest of the weight, and its momentum, stay as they are until a step uses them, as torch's SGD
already leaves a whole block that a step did not run (its gradient is None). That is a different rule from
the paper's, where unused channels keep drifting with their momentum and decay, so it is the recipe's choice
(``update: all`` is the default). A weight whose step used all of it, and every weight whose region is not
recorded, gets torch's update exactly (so in a sandwich phase, whose largest subnet uses every weight, both
rules train the same weights bit for bit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn
from torch.optim.sgd import sgd

from ofa.utils.errors import OFAError

Regions = dict[nn.Parameter, tuple[int, ...]]  # a weight -> the leading region (its first dims' sizes) a step used


def region_recorders(model: nn.Module) -> list[nn.Module]:
    """The modules of ``model`` that record the region of their weights a step used."""
    return [m for m in model.modules() if callable(getattr(m, "take_used_regions", None))]


class UsedWeightsSGD(torch.optim.SGD):
    """torch's SGD (momentum, dampening 0, Nesterov, weight decay per group) over what the step used.

    The momentum buffers are torch's (full-size, in ``state[p]["momentum_buffer"]``), so a checkpoint of
    either optimizer resumes in the other.
    """

    def __init__(
        self, model: nn.Module, groups: Iterable[dict], lr: float, momentum: float = 0.0, nesterov: bool = False
    ) -> None:
        self.recorders = region_recorders(model)
        if not self.recorders:
            raise OFAError(
                f"optimizer.update: used needs a model whose steps record the weights they use (the resnet "
                f"family's supernet); {type(model).__name__} records none: set optimizer.update: all"
            )
        super().__init__(groups, lr=lr, momentum=momentum, nesterov=nesterov)

    def take_used_regions(self) -> Regions:
        """What the forwards since the last step used (each recorder's record starts again empty)."""
        regions: Regions = {}
        for recorder in self.recorders:
            regions.update(recorder.take_used_regions())
        return regions

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One update on what the forwards since the last one used (``closure``, as torch's: re-evaluates the
        loss first, and its value is returned)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        regions = self.take_used_regions()
        for group in self.param_groups:
            params, grads, buffers = [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if group["momentum"] and "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                buffer = state.get("momentum_buffer")
                corner = tuple(slice(n) for n in regions.get(p, ()))
                params.append(p[corner])
                grads.append(p.grad[corner])
                buffers.append(None if buffer is None else buffer[corner])
            sgd(
                params,
                grads,
                buffers,
                weight_decay=group["weight_decay"],
                momentum=group["momentum"],
                lr=group["lr"],
                dampening=group["dampening"],
                nesterov=group["nesterov"],
                maximize=group["maximize"],
                foreach=False,
            )
        return loss
