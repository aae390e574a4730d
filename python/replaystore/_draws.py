"""The draws of a unit by name (``sample_transitions``, ``sample_sequences``,
``sample_episodes``, ``sample_fragments``, ``sample_groups``): each builds a ``Request``
and calls the handle's one ``sample``, which every class implements once in the
extension. Written once here and attached to the classes that draw them
(``ReplayBuffer`` and ``Reader``; ``BufferGroup``'s take a member), so that a keyword
means the same on every handle (``out_type="torch"`` or ``"jax"`` among them, as
``sample`` takes it; ``None``, NumPy, is not passed on). Also how a pickled ``Request`` is built again."""

from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np

from ._native import BufferGroup, Error, Reader, ReplayBuffer, Request

_Names = Union[str, Sequence[str]]


def _rebuild(kind: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Request:
    """``Request.<kind>(*args, **kwargs)``: what ``Request.__reduce__`` names."""
    return getattr(Request, kind)(*args, **kwargs)


def _draw(handle: Any, request: Request, *args: Any, seed: Optional[int] = None,
          **output: Any) -> Any:
    """``handle.sample(request, ...)``, passing only the keywords set: a keyword the
    extension parses costs a little on every call of a training loop."""
    output = {k: v for k, v in output.items() if v is not None and v is not False}
    if seed is not None:
        output["seed"] = seed
    return handle.sample(request, *args, **output)


def sample_transitions(self, n: int, obs: _Names, *, seed: Optional[int] = None,
                       out: Optional[Dict[str, Any]] = None, nested: bool = False,
                       values: Optional[str] = None, pad: Optional[float] = None,
                       out_type: Optional[str] = None, **options: Any) -> Dict[str, Any]:
    """Draws ``n`` transitions of an episodic buffer: uniformly, or by priority with
    ``beta``. ``obs`` names the observation field(s): each comes back before the step
    under its name and after it as ``next_<name>``; every other field is the step's.
    ``stack=k`` stacks the ``k`` newest frames of each observation (repeating an
    episode's first); ``nstep=n`` sums ``n`` rewards with discount ``gamma`` into
    ``returns`` and bootstraps from the observation ``n`` steps on (``discounts`` is
    ``gamma**k``, 0 after a termination). Also ``terminated``, ``truncated``,
    ``indices`` (the rows ending each transition's first step) and ``weights`` by
    priority. With ``goal`` and ``achieved``, hindsight relabeling as SB3's
    ``HerReplayBuffer`` does it (``strategy``, ``n_sampled_goal``; ``compute_reward``
    gives the relabeled rows their rewards). A reader draws the same for the same seed;
    a transition whose rows the writer overwrites while they are copied is drawn again.
    ``options`` are ``Request.transitions``'s keywords (``beta``, ``stack``, ``nstep``,
    ``gamma``, ``goal``, ``achieved``, ``strategy``, ``n_sampled_goal``,
    ``compute_reward``, ``info``), drawn by ``sample``. Variable-length fields (text,
    token arrays) come back as ``values`` says (``"list"``, ``"padded"`` with ``pad``,
    ``"flat"``), an observation's from the same rows as a fixed one's: with ``stack=k``
    shaped ``[n, k, ...]`` (a list of ``k`` values per transition)."""
    request = Request.transitions(n, obs, **options)
    return _draw(self, request, seed=seed, out=out, nested=nested, values=values, pad=pad,
                 out_type=out_type)


def sample_sequences(self, n: int, length: int, obs: _Names, *, burn_in: int = 0,
                     beta: Optional[float] = None, seed: Optional[int] = None,
                     out: Optional[Dict[str, Any]] = None, values: Optional[str] = None,
                     pad: Optional[float] = None, out_type: Optional[str] = None) -> Dict[str, Any]:
    """Draws ``n`` sequences of ``length`` steps (after ``burn_in`` steps to warm up a
    recurrent state) from an episodic buffer: uniformly, or by priority with ``beta``.
    Arrays are ``[n, burn_in + length, ...]``, named as ``sample_transitions`` names
    them, with ``mask`` false on positions past an episode's end. Variable-length
    fields come back as ``values`` says: ``"padded"`` is ``[n, burn_in + length,
    longest]`` with ``<name>_lengths`` ``[n, burn_in + length]``, ``"list"`` a list of
    ``n`` lists; padding positions hold empty values. ``Request.sequences`` with
    ``sample``."""
    request = Request.sequences(n, length, obs, burn_in=burn_in, beta=beta)
    return _draw(self, request, seed=seed, out=out, values=values, pad=pad, out_type=out_type)


def sample_episodes(self, n: Optional[int] = None, *, beta: Optional[float] = None,
                    seed: Optional[int] = None, replace: bool = True, remove: bool = False,
                    covering: Optional[int] = None, out: Optional[Dict[str, Any]] = None,
                    values: Optional[str] = None, pad: Optional[float] = None,
                    out_type: Optional[str] = None) -> Dict[str, Any]:
    """Draws ``n`` whole episodes (ended ones with every row live, none removed):
    uniformly (distinct ones with ``replace=False``), or by the mean priority of their
    rows with ``beta``. ``covering=k`` instead draws distinct episodes in random order
    until their steps reach ``k``, at least one (UnstableBaselines'
    ``EpisodeBuffer.get_batch(k)``; pass ``n=None``). ``remove=True`` removes every
    episode returned (the writer of a buffer with item states). Returns the rows one
    episode after another (each field, ``indices``; variable-length fields as
    ``values`` says), ``offsets`` (episode ``i`` is rows ``offsets[i]:offsets[i+1]``,
    its reset row first), ``episodes`` (ids) and ``weights`` by priority.
    ``Request.episodes`` with ``sample``.

    >>> import tempfile, numpy as np, replaystore as rs
    >>> buf = rs.ReplayBuffer.create(tempfile.mkdtemp() + "/b", {"obs": "int64"}, 64,
    ...                              episodic=True, item_states=True)
    >>> for steps in (2, 3, 4):
    ...     _ = buf.add_episode({"obs": np.arange(steps + 1)})
    >>> got = buf.sample_episodes(covering=5, remove=True)
    >>> len(got["offsets"]) - 1, len(buf) + len(got["obs"])   # two reach 5 steps, removed
    (2, 12)
    """
    request = Request.episodes(n, covering=covering, beta=beta, replace=replace, remove=remove)
    return _draw(self, request, seed=seed, out=out, values=values, pad=pad, out_type=out_type)


def sample_fragments(self, n: Optional[int] = None, *, beta: Optional[float] = None,
                     seed: Optional[int] = None, replace: bool = True, remove: bool = False,
                     covering: Optional[int] = None, out: Optional[Dict[str, Any]] = None,
                     values: str = "list", pad: float = 0.0,
                     out_type: Optional[str] = None) -> Dict[str, Any]:
    """Draws ``n`` whole fragments (the rows of one ``add_batch`` call each; never one
    that eviction has cut, nor, with item states, one that lost a row to a removal):
    uniformly (distinct ones with ``replace=False``), or by the mean priority of their
    rows with ``beta``. ``covering=k`` instead draws distinct fragments in random order
    until their rows reach ``k`` (UnstableBaselines' ``EpisodeBuffer.get_batch(k)``;
    pass ``n=None``). ``remove=True`` removes every row returned (the writer, with item
    states). Returns the rows concatenated (one array per field, plus ``indices``;
    variable-length fields as ``values`` says), ``offsets`` (fragment ``i`` is rows
    ``offsets[i]:offsets[i+1]``) and, with ``beta``, one weight per fragment in
    ``weights``. ``Request.fragments`` with ``sample``."""
    request = Request.fragments(n, covering=covering, beta=beta, replace=replace, remove=remove)
    return _draw(self, request, seed=seed, out=out, values=values, pad=pad, out_type=out_type)


def sample_groups(self, n: int, by: _Names, *, unroll: int = 0, replace: bool = True,
                  remove: bool = False, seed: Optional[int] = None,
                  out: Optional[Dict[str, Any]] = None, values: str = "list",
                  pad: float = 0.0, out_type: Optional[str] = None) -> Dict[str, Any]:
    """Draws ``n`` groups of the items sharing the values of ``by`` (a field name or a
    list of them; DI-engine's ``sample(n, groupby=...)``): uniformly over the groups
    (distinct ones with ``replace=False``), each group's items (not removed) in the
    order they were added, or with ``unroll=k`` a window of ``k`` consecutive ones
    starting at random, from the groups that have ``k`` (DI-engine's ``unroll_len``).
    ``remove=True`` removes what it returns (the writer, with item states). Returns the
    rows concatenated (one array per field, plus ``indices``) and ``offsets`` (group
    ``i`` is rows ``offsets[i]:offsets[i+1]``). ``Request.groups`` with ``sample``."""
    request = Request.groups(n, by, unroll=unroll, replace=replace, remove=remove)
    return _draw(self, request, seed=seed, out=out, values=values, pad=pad, out_type=out_type)


def _group_sample_transitions(self, n: int, member: str, obs: _Names, *, nstep: int = 1,
                              gamma: float = 1.0, stack: int = 1, beta: Optional[float] = None,
                              seed: Optional[int] = None, at: Any = None) -> Dict[str, Any]:
    """Transitions of episodic member ``member``, as ``ReplayBuffer.sample_transitions``
    draws them (n-step returns, stacking, by priority with ``beta``); with ``at``, read
    at those step rows instead (``n`` is then their number): what a transition's
    ``indices`` entry names."""
    if at is None:
        request = Request.transitions(n, obs, beta=beta, stack=stack, nstep=nstep, gamma=gamma)
    else:
        at = np.asarray(at)
        if len(at) != n:
            raise ValueError(f"n is {n} but at holds {len(at)} step indices")
        if beta is not None:
            raise Error("at= reads the transitions at given steps; beta= draws them by priority")
        request = Request.transitions_at(at, obs, stack=stack, nstep=nstep, gamma=gamma)
    return self.sample(request, member, seed=seed)


def _group_sample_sequences(self, n: int, member: Optional[str], length: int, obs: _Names, *,
                            burn_in: int = 0, beta: Optional[float] = None,
                            seed: Optional[int] = None) -> Any:
    """Sequences of ``length`` trained steps of episodic member ``member``, each after
    ``burn_in`` warm-up steps (RLlib's ``replay_sequence_length`` and
    ``replay_burn_in`` of a multi-agent buffer), as ``ReplayBuffer.sample_sequences``
    draws them; without ``member``, ``{name: batch}`` from every member."""
    return self.sample(Request.sequences(n, length, obs, burn_in=burn_in, beta=beta), member,
                       seed=seed)


def _group_sample_episodes(self, n: int, member: Optional[str] = None, *,
                           beta: Optional[float] = None, seed: Optional[int] = None) -> Any:
    """Whole episodes of episodic member ``member`` (ended ones with every row live), as
    ``ReplayBuffer.sample_episodes`` draws them; without ``member``, ``{name: batch}``."""
    return self.sample(Request.episodes(n, beta=beta), member, seed=seed)


for _cls in (ReplayBuffer, Reader):
    for _f in (sample_transitions, sample_sequences, sample_episodes, sample_fragments,
               sample_groups):
        setattr(_cls, _f.__name__, _f)
BufferGroup.sample_transitions = _group_sample_transitions
BufferGroup.sample_sequences = _group_sample_sequences
BufferGroup.sample_episodes = _group_sample_episodes
