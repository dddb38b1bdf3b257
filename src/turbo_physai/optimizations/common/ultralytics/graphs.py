"""``ultralytics.rtdetr.cuda_graph``: RT-DETR's ``predict`` replayed as CUDA graphs, in training
too.

Inference (no targets) captures the whole ``predict``. A training call passes the targets
(``predict(img, batch=targets)``, from the loss) and the decoder draws its denoising noise on the
host, which no graph can replay: there the layers before the decoder (backbone and hybrid
encoder, most of the work) are captured and replayed, forward and backward, and the decoder runs
eagerly on their outputs, drawing stock's noise. With ``ultralytics.rtdetr.denoising_graph_safe``
applied too, the host's draw is made here, before the call, and handed to the head
(:mod:`.denoising`): the whole training ``predict`` is captured per box-count signature, and
where it cannot be (more signatures than ``max_graphs``) it runs eagerly with the layers before
the head replayed. :func:`layers_before_head` is ``predict``'s loop without the head;
:func:`check` accepts a release whose ``predict`` is validated code (``validated.json``), so that
loop is still theirs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from .. import cuda_graph, host_code
from . import denoising
from .msda import EVIDENCE


def check(context):
    return host_code.check(context, EVIDENCE)


def layers_before_head(model, x):
    """What ``RTDETRDetectionModel.predict`` feeds its head: the layers before it run in order,
    each on the previous output or on the saved outputs its ``f`` names."""
    saved = []
    for layer in model.model[:-1]:
        if layer.f != -1:
            x = saved[layer.f] if isinstance(layer.f, int) else \
                [x if j == -1 else saved[j] for j in layer.f]
        x = layer(x)
        saved.append(x if layer.i in model.save else None)
    return [saved[j] for j in model.model[-1].f]


def predict_wrapper(original: Callable[..., Any], options: Mapping[str, Any]):
    """Wrap factory for ``RTDETRDetectionModel.predict``: the whole call captured, except a call
    with targets only (``batch=``), whose layers before the head are."""
    import torch

    whole = cuda_graph.cuda_graph_wrapper(original, options)
    body = cuda_graph.cuda_graph_wrapper(layers_before_head, options)

    def training_predict(self, x, batch, noise, relabels):
        """The training ``predict``, its head taking the class noise drawn before the call."""
        with denoising.given(noise, relabels):
            return self.model[-1](body(self, x), batch)

    training = cuda_graph.cuda_graph_wrapper(training_predict, options)

    @functools.wraps(original)
    def predict(self, x, *args, **kwargs):
        if args or list(kwargs) != ["batch"] or kwargs["batch"] is None:
            return whole(self, x, *args, **kwargs)
        batch = kwargs["batch"]
        drawn = None
        if denoising.installed() and isinstance(x, torch.Tensor) \
                and not torch.compiler.is_compiling() \
                and not (x.is_cuda and torch.cuda.is_current_stream_capturing()):
            drawn = denoising.predraw(self.model[-1], batch, x.device)
        if drawn is None:
            return self.model[-1](body(self, x), batch)
        return training(self, x, batch, *drawn)

    predict._turbo_physai_graph_states = whole._turbo_physai_graph_states
    predict._turbo_physai_part_states = {
        layers_before_head.__name__: body._turbo_physai_graph_states,
        training_predict.__name__: training._turbo_physai_graph_states}
    return predict
