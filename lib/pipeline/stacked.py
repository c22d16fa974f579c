"""Several training runs of one model shape in one computation: a tiny model's step costs mostly
per-operation overhead (Python, dispatch, small kernels), so k runs stacked pay it once.

:class:`Stack` takes ``k`` models of the same architecture (e.g. one model at the ``k`` learning
rates of a unit) that see the *same* batches. Each parameter of the k models is moved into one
stacked tensor ``[k, ...]`` (the models' own parameters become views of it, so each model still
is an ordinary model: its own optimiser, gradient clipping, validation, saving and resume state
work on it unchanged). The forward pass runs a copy of the architecture whose linear layers,
embeddings and norms apply run ``i``'s weights to rows ``i*B .. (i+1)*B`` of a batch repeated k
times (:func:`stack_rows`); attention and every element-wise operation act row by row, so they
see each run's rows as the sequential run does. :meth:`Stack.losses` returns each run's loss,
computed by the model's own loss function on its rows; one backward of their sum gives every run
its own gradient (runs share nothing), which :meth:`Stack.backward` hands to each model's
parameters.

Whether the arithmetic stays bit for bit the sequential one depends on the matrix kernels
(:data:`LINEAR` chooses how a stacked linear layer multiplies: ``"bmm"``, one batched product, the
default, or ``"loop"``, one product per run); ``bench/bench_batched.py`` measures both: on this
machine both were bit-identical to the sequential runs for every (family, size) of the mini zoo
(pinned AVX2 arithmetic, one thread), and ``"bmm"`` the faster.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

LINEAR = "bmm"
MODES = ("loop", "bmm")


class StackError(ValueError):
    """Models that cannot be stacked (other architectures or shapes); the message says which."""


def _modules():
    import torch
    from transformers.pytorch_utils import Conv1D

    nn = torch.nn
    F = torch.nn.functional

    class _Stacked(nn.Module):
        def __init__(self, stack: Stack):
            super().__init__()
            object.__setattr__(self, "stack", stack)       # not a submodule

        def _chunks(self, x):
            return x.view(self.stack.k, -1, *x.shape[1:])

    class StackedLinear(_Stacked):
        """nn.Linear (weight [out, in]) or GPT-2's Conv1D (weight [in, out]) with k weights."""

        def __init__(self, stack, weight, bias, transposed: bool):
            super().__init__(stack)
            object.__setattr__(self, "weight", weight)
            object.__setattr__(self, "bias", bias)
            self.transposed = transposed

        def forward(self, x):
            k = self.stack.k
            rows = x.reshape(k, -1, x.shape[-1])                  # [k, B*T, in]
            if self.stack.linear == "loop":
                outs = []
                for i in range(k):
                    w = self.weight[i]
                    b = None if self.bias is None else self.bias[i]
                    if self.transposed:                            # Conv1D: addmm(bias, x, W)
                        outs.append(torch.addmm(b, rows[i], w) if b is not None else rows[i] @ w)
                    else:
                        outs.append(F.linear(rows[i], w, b))
                y = torch.stack(outs)
            else:
                w = self.weight if self.transposed else self.weight.transpose(1, 2)
                y = torch.baddbmm(self.bias.unsqueeze(1), rows, w) if self.bias is not None else torch.bmm(rows, w)
            return y.view(*x.shape[:-1], y.shape[-1])

    class StackedEmbedding(_Stacked):
        def __init__(self, stack, weight, padding_idx):
            super().__init__(stack)
            object.__setattr__(self, "weight", weight)
            self.padding_idx = padding_idx

        def forward(self, ids):
            k, vocab = self.stack.k, self.weight.shape[1]
            table = self.weight.reshape(k * vocab, -1)
            if ids.shape[0] == self.stack.rows * k:               # token ids: run i's rows look up run i's table
                offsets = (torch.arange(k, device=ids.device) * vocab).repeat_interleave(self.stack.rows)
                return F.embedding(ids + offsets.view(-1, *[1] * (ids.dim() - 1)), table)
            # positions shared by every row ([1, T]): each run's embedding, repeated over its rows
            out = torch.stack([F.embedding(ids, self.weight[i]) for i in range(k)])        # [k, 1, T, d]
            return out.expand(k, self.stack.rows, *out.shape[2:]).reshape(k * self.stack.rows, *out.shape[2:])

    class StackedLayerNorm(_Stacked):
        def __init__(self, stack, weight, bias, shape, eps):
            super().__init__(stack)
            object.__setattr__(self, "weight", weight)
            object.__setattr__(self, "bias", bias)
            self.shape, self.eps = tuple(shape), eps

        def forward(self, x):
            parts = self._chunks(x)
            return torch.cat([F.layer_norm(parts[i], self.shape, self.weight[i],
                                           None if self.bias is None else self.bias[i], self.eps)
                              for i in range(self.stack.k)])

    class StackedRMSNorm(_Stacked):
        """Llama's RMSNorm: the normalisation row by row, then run i's weight on its rows."""

        def __init__(self, stack, weight, eps):
            super().__init__(stack)
            object.__setattr__(self, "weight", weight)
            self.eps = eps

        def forward(self, x):
            dtype = x.dtype
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            k = self.stack.k
            w = self.weight.view(k, *[1] * (x.dim() - 1), self.weight.shape[-1])
            return (w * self._chunks(h.to(dtype))).view(x.shape)

    return {"linear": StackedLinear, "embedding": StackedEmbedding, "layernorm": StackedLayerNorm,
            "rmsnorm": StackedRMSNorm, "Conv1D": Conv1D}


def stackable(model) -> str | None:
    """None when ``model`` can train stacked with the same arithmetic as alone; otherwise why not:
    a layer with parameters that has no stacked form here (linear, GPT-2's Conv1D, embedding,
    LayerNorm, RMSNorm), or dropout (its random draws would come in another order)."""
    import torch
    from transformers.pytorch_utils import Conv1D

    known = (torch.nn.Linear, Conv1D, torch.nn.Embedding, torch.nn.LayerNorm)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Dropout) and module.p > 0:
            return f"dropout {module.p} in {name}"
        own = list(module.parameters(recurse=False))
        if own and not (isinstance(module, known) or type(module).__name__.endswith("RMSNorm")):
            return f"no stacked form of {type(module).__name__} ({name})"
    config = getattr(model, "config", None)
    for key in ("attention_dropout", "attn_pdrop"):     # attention's dropout, drawn inside the kernel
        value = getattr(config, key, 0) if config is not None else 0
        if isinstance(value, (int, float)) and value > 0:
            return f"{key} {value}"
    return None


def stack_rows(tensor, k: int):
    """``tensor`` (rows first) repeated for ``k`` runs: [B, ...] -> [k*B, ...], run i's rows at i*B."""
    return tensor.repeat(k, *[1] * (tensor.dim() - 1))


class Stack:
    """``models`` (same class, same parameter shapes) trained together on the same batches.

    After construction each model's parameters are views of this stack's tensors; call
    :meth:`unstack` to give every model storage of its own again (done at the end of every epoch by
    :meth:`lib.pipeline.training.StackedRuns.epoch`, which stacks only the runs still training, so a
    run that stops early is left out of the next epoch's stack).
    """

    def __init__(self, models: Sequence, linear: str | None = None):
        import torch

        if linear is not None and linear not in MODES:
            raise StackError(f"stacked linear layers: {linear!r} is not one of {list(MODES)}")
        self.linear = linear or LINEAR
        self.models = list(models)
        self.k = len(self.models)
        self.rows = 0
        if self.k < 1:
            raise StackError("stack: no models")
        first = self.models[0]
        shapes = [(n, tuple(p.shape)) for n, p in first.named_parameters()]
        for m in self.models[1:]:
            if type(m) is not type(first) or [(n, tuple(p.shape)) for n, p in m.named_parameters()] != shapes:
                raise StackError(f"stack: {type(m).__name__} does not have the parameters of {type(first).__name__}")
        self.names = [n for n, _ in shapes]
        # one stacked leaf per parameter; the models' parameters become views of it
        self.tensors = {}
        for name in self.names:
            per_run = [dict(m.named_parameters())[name] for m in self.models]
            stacked = torch.stack([p.detach() for p in per_run]).requires_grad_(True)
            for i, p in enumerate(per_run):
                p.data = stacked.detach()[i]
            self.tensors[name] = stacked
        self.net = self._build(first)

    def _build(self, first):
        """A copy of ``first``'s architecture whose parameterised layers use the stacked tensors."""
        import torch

        kinds = _modules()
        by_id = {id(p): self.tensors[n] for n, p in first.named_parameters()}
        net = copy.deepcopy(first)
        stacked_of = {}
        for (name, _), (_, original) in zip(list(net.named_modules()), list(first.named_modules())):
            weight = getattr(original, "weight", None)
            if weight is None or not isinstance(weight, torch.nn.Parameter):
                continue
            w = by_id[id(weight)]
            bias = getattr(original, "bias", None)
            b = by_id[id(bias)] if isinstance(bias, torch.nn.Parameter) else None
            if isinstance(original, torch.nn.Linear):
                new = kinds["linear"](self, w, b, transposed=False)
            elif isinstance(original, kinds["Conv1D"]):
                new = kinds["linear"](self, w, b, transposed=True)
            elif isinstance(original, torch.nn.Embedding):
                new = kinds["embedding"](self, w, original.padding_idx)
            elif isinstance(original, torch.nn.LayerNorm):
                new = kinds["layernorm"](self, w, b, original.normalized_shape, original.eps)
            elif type(original).__name__.endswith("RMSNorm"):
                new = kinds["rmsnorm"](self, w, getattr(original, "variance_epsilon", getattr(original, "eps", 1e-6)))
            else:
                raise StackError(f"stack: no stacked form of {type(original).__name__} ({name})")
            stacked_of[name] = new
        for name, new in stacked_of.items():
            parent, _, attr = name.rpartition(".")
            setattr(net.get_submodule(parent) if parent else net, attr, new)
        for p in net.parameters(recurse=True):           # anything left is a copy: nothing should be
            raise StackError(f"stack: parameter left unstacked in {type(first).__name__}: {p.shape}")
        return net

    def losses(self, input_ids, labels, attention_mask=None, **loss_kwargs):
        """Each run's loss on the batch (``input_ids`` [B, T], the same for every run) as the model's
        own forward with ``labels`` computes it: a tensor [k]."""
        first = self.models[0]
        self.rows = input_ids.shape[0]
        self.net.train(first.training)
        kwargs = {"attention_mask": None if attention_mask is None else stack_rows(attention_mask, self.k)}
        logits = self.net(input_ids=stack_rows(input_ids, self.k), use_cache=False, **kwargs).logits
        vocab = first.config.get_text_config().vocab_size if hasattr(first.config, "get_text_config") \
            else first.config.vocab_size
        per_run = logits.view(self.k, self.rows, *logits.shape[1:])
        import torch

        return torch.stack([first.loss_function(logits=run, labels=labels, vocab_size=vocab, **loss_kwargs)
                            for run in per_run.unbind(0)])      # unbind: one gradient for all, not k

    def backward(self, losses) -> None:
        """Backward of every run's loss at once; each model's parameters get their run's gradient
        (views of the stacked gradients, accumulated into an existing gradient)."""
        losses.sum().backward()
        for name, stacked in self.tensors.items():
            grad = stacked.grad
            for i, m in enumerate(self.models):
                p = m.get_parameter(name)
                p.grad = grad[i] if p.grad is None else p.grad + grad[i]
            stacked.grad = None

    def unstack(self) -> list:
        """Give every model its own parameter storage again (copies); the stack is not used after."""
        for name in self.names:
            for m in self.models:
                p = m.get_parameter(name)
                p.data = p.data.clone()
        self.tensors = {}
        return self.models
