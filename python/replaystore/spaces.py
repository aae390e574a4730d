"""Schemas from Gymnasium spaces (Box, Discrete, MultiDiscrete, MultiBinary, Dict, and
the variable-length Text and Sequence).

The spaces are read by their class name and attributes, so Gymnasium itself is needed
only to make them, never to import replaystore.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple, Union

import numpy as np

from ._native import Schema, SchemaError

# (dtype, shape), or a variable-length field (kind or dtype, (None,), maximum length).
FieldSpec = Union[Tuple[str, Tuple[int, ...]], Tuple[str, Tuple[None], int]]


def _space_fields(name: str, space: Any) -> Dict[str, FieldSpec]:
    kind = type(space).__name__
    if kind == "Box":
        return {name: (np.dtype(space.dtype).str, tuple(int(d) for d in space.shape))}
    if kind == "Discrete":
        return {name: ("<i8", ())}
    if kind == "MultiDiscrete":
        return {name: ("<i8", tuple(int(d) for d in np.shape(space.nvec)))}
    if kind == "MultiBinary":
        n = space.n
        shape = (int(n),) if np.isscalar(n) else tuple(int(d) for d in n)
        return {name: ("|i1", shape)}
    if kind == "Text":
        # max_length counts characters; the field's bound counts UTF-8 bytes.
        width = max((len(c.encode()) for c in space.character_set), default=1)
        return {name: ("str", (None,), int(space.max_length) * width)}
    if kind == "Sequence":
        inner = _space_fields(name, space.feature_space)
        spec = inner.get(name)
        if len(inner) != 1 or spec is None or len(spec) != 2 or spec[1] != ():
            raise SchemaError(
                f"{name}: a Sequence of {type(space.feature_space).__name__} "
                f"{getattr(space.feature_space, 'shape', '')} is not a 1-D ragged field "
                "(a Sequence of Discrete or of scalar Box spaces is)"
            )
        return {name: (spec[0], (None,))}
    if kind == "Dict":
        fields: Dict[str, FieldSpec] = {}
        for key, sub in space.spaces.items():
            fields.update(_space_fields(f"{name}.{key}", sub))
        return fields
    raise SchemaError(
        f"{name}: a {kind} space has no array form here "
        "(Box, Discrete, MultiDiscrete, MultiBinary, Text, Sequence and Dict of those do)"
    )


def _spaces_of(env: Any) -> Tuple[Any, Any]:
    """An env's (observation_space, action_space); a vector env is refused: its spaces
    are batched (``obs (n_envs, ...)``), and a buffer keeps one env's transitions."""
    if hasattr(env, "single_observation_space") or hasattr(env, "num_envs"):
        raise SchemaError(
            f"a vector env ({type(env).__name__}, {getattr(env, 'num_envs', '?')} envs) has "
            "batched spaces: its observation_space has a leading env dimension. Pass one "
            "env's spaces: Schema.from_spaces(env.single_observation_space, "
            "env.single_action_space), and add_batch each step's rows"
        )
    if not (hasattr(env, "observation_space") and hasattr(env, "action_space")):
        raise TypeError(
            f"from_spaces takes (observation_space, action_space) or an env with those "
            f"attributes, not a {type(env).__name__}"
        )
    return env.observation_space, env.action_space


def _from_spaces(observation_space: Any, action_space: Any = None) -> Schema:
    """``Schema.from_spaces``, which calls this (the one name callers use): the schema
    of a transition for an environment with these spaces, or for an env
    given alone (``from_spaces(env)``; a vector env is refused with the single-env
    spaces to use instead).

    Fields: ``obs`` and ``next_obs`` (``obs.<key>`` / ``next_obs.<key>`` for a Dict
    space: ``add(obs={"key": ...})`` and ``sample(..., nested=True)`` keep the dicts),
    ``action``, ``reward`` (float32), ``terminated`` and ``truncated`` (bool).
    Discrete and MultiDiscrete actions are int64, MultiBinary int8, Box keeps its dtype.
    """
    if action_space is None:
        observation_space, action_space = _spaces_of(observation_space)
    fields: Dict[str, FieldSpec] = {}
    fields.update(_space_fields("obs", observation_space))
    fields.update(_space_fields("action", action_space))
    fields["reward"] = ("<f4", ())
    fields.update(_space_fields("next_obs", observation_space))
    fields["terminated"] = ("|b1", ())
    fields["truncated"] = ("|b1", ())
    return Schema(fields)
