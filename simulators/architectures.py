"""Model profiles: the architecture numbers a cost model needs (layers, widths, heads, vocabulary), taken from
each model's public `config.json`, and the pair (target p + draft q) built from a `conf/model/<pair>.yaml`
`profile:` section.

Parameter counts are computed from the widths (Llama-style decoder: q/k/v/o projections + gated MLP, two
norms, embeddings and LM head) and checked against the published count when one is given.

This module knows nothing of hardware, clocks or tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ouroboros.errors import OuroborosError


@dataclass(frozen=True)
class ModelProfile:
    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    max_context: int = 4096
    tie_embeddings: bool = False
    qkv_bias: bool = False
    params_b: float | None = None   # published parameter count (billions), cross-checked
    source: str = ""                # URL of the config.json the numbers come from

    @classmethod
    def from_dict(cls, d: dict[str, Any], who: str = "model") -> ModelProfile:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise OuroborosError(f"{who} profile has no field {unknown[0]!r}; fields: {', '.join(sorted(known))}")
        try:
            m = cls(**d)
        except TypeError as e:
            raise OuroborosError(f"{who} profile: {e}") from None
        for f in ("layers", "hidden", "intermediate", "heads", "kv_heads", "vocab", "max_context"):
            if getattr(m, f) < 1:
                raise OuroborosError(f"{who} profile {m.name!r}: {f} must be >= 1, got {getattr(m, f)}")
        if m.hidden % m.heads or m.heads % m.kv_heads:
            raise OuroborosError(f"{who} profile {m.name!r}: hidden {m.hidden} / heads {m.heads} / kv_heads "
                                 f"{m.kv_heads} are not divisible")
        if m.params_b is not None and abs(m.params - m.params_b * 1e9) > 0.03 * m.params_b * 1e9:
            raise OuroborosError(f"{who} profile {m.name!r}: widths give {m.params / 1e9:.2f}B parameters but "
                                 f"params_b says {m.params_b}B (more than 3% apart)")
        return m

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        h, kv, i = self.hidden, self.kv_dim, self.intermediate
        attn = h * h + 2 * h * kv + h * h + (h + 2 * kv if self.qkv_bias else 0)
        return attn + 3 * h * i + 2 * h

    @property
    def head_params(self) -> int:
        """LM head (read every forward, tied or not) + final norm."""
        return self.vocab * self.hidden + self.hidden

    @property
    def params(self) -> int:
        emb = 0 if self.tie_embeddings else self.vocab * self.hidden
        return self.layers * self.layer_params + self.head_params + emb

    @property
    def read_params(self) -> int:
        """Parameters read from memory by one forward (the embedding table is gathered, not read)."""
        return self.layers * self.layer_params + self.head_params

    def kv_bytes_per_token(self, dtype_bytes: float) -> float:
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def hf_config(self):
        """A stock transformers config of this shape (Qwen2 where the q/k/v projections carry biases, else Llama):
        a random-init model of it has exactly `params` parameters and costs what the real model costs per forward
        (`simulators calibrate clock --weights random` times one on any device without the weights)."""
        from transformers import LlamaConfig, Qwen2Config

        kw = {"vocab_size": self.vocab, "hidden_size": self.hidden, "intermediate_size": self.intermediate,
              "num_hidden_layers": self.layers, "num_attention_heads": self.heads,
              "num_key_value_heads": self.kv_heads, "max_position_embeddings": self.max_context,
              "tie_word_embeddings": self.tie_embeddings}
        return Qwen2Config(**kw) if self.qkv_bias else LlamaConfig(**kw)


@dataclass(frozen=True)
class PairProfile:
    name: str
    target: ModelProfile
    draft: ModelProfile
    measured: dict[str, Any] | None = None   # optional {hardware, t_target_s, t_draft_s, ...} measurements

    @classmethod
    def from_model_cfg(cls, model: dict[str, Any]) -> PairProfile:
        prof = model.get("profile")
        name = str(model.get("name") or model.get("kind") or "pair")
        if not prof:
            raise OuroborosError(f"model {name!r} has no profile: section (conf/model/<pair>.yaml needs "
                                 "profile.target and profile.draft for the simulator)")
        for side in ("target", "draft"):
            if not isinstance(prof.get(side), dict):
                raise OuroborosError(f"model {name!r}: profile.{side} is missing")
        return cls(name=name, target=ModelProfile.from_dict(prof["target"], "target"),
                   draft=ModelProfile.from_dict(prof["draft"], "draft"), measured=prof.get("measured"))


def conf_root() -> Path:
    return Path(__file__).resolve().parent.parent / "conf"


NAME = re.compile(r"[A-Za-z0-9_.-]+")   # what a name that becomes (part of) a file name may hold


def check_name(name: object, what: str) -> str:
    """`name` unless it could leave its folder as (part of) a file name: only letters, digits, '_', '.' and '-', no
    leading dot (so no path separator, no '..'); else one line naming `what` (the flag or key that gave it)."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or name.startswith("."):
        raise OuroborosError(f"{what} {name!r}: a name may hold only letters, digits, '_', '.' and '-', and may not "
                             "start with a dot")
    return name


USER_CONF = Path("runs") / "conf"   # presets you own, relative to where you run: on Hydra's search path too


def conf_file(group: str, name: str) -> Path | None:
    """conf/<group>/<name>.yaml, else runs/conf/<group>/<name>.yaml (your own presets, e.g. profiles `calibrate
    measured --out-dir runs/conf/sim` wrote), in the order Hydra's search path (conf/config.yaml) finds them."""
    for d in (conf_root() / group, USER_CONF / group):
        if (d / f"{name}.yaml").is_file():
            return d / f"{name}.yaml"
    return None


def conf_names(group: str) -> list[str]:
    """Every name conf_file finds in `group`."""
    return sorted({p.stem for d in (conf_root() / group, USER_CONF / group) for p in d.glob("*.yaml")})


def load_conf(group: str, name: str) -> dict[str, Any]:
    """A Hydra group file as a plain dict (for the simulator's own entry points); unknown names -> one line."""
    import yaml

    path = conf_file(group, name)
    if path is None:
        raise OuroborosError(f"unknown {group} profile {name!r}; known: {', '.join(conf_names(group))}")
    with open(path, encoding="utf-8") as f:
        return dict(yaml.safe_load(f) or {})
