"""Multi-agent episodes, stored per module: what RLlib's new-stack
``MultiAgentEpisodeReplayBuffer`` keeps, in a ``BufferGroup`` (one checkpoint for all).

Agents of a multi-agent episode act at different environment steps: an agent observes
at some steps only (turn-based games, agents that join late or leave early). Each
agent's steps are one single-agent episode, stored in the episodic member of the module
(policy) that agent maps to, with the environment step of every observation
(``env_t``) and the agent's slot (``agent``). One more member, ``__env_steps__``, holds a
row per environment step at which some agent acted: for each agent slot, the step row
(in that agent's module) of the action it took there, or none. ``__agents__`` names the
slots. All three kinds of member are checkpointed together by the group's
``get_state`` / ``set_state`` (a crash mid-restore leaves every member at one state).

Draws (``sample``):

- ``replay_mode="independent"`` (RLlib's default): ``n`` transitions from each module
  (or each of ``modules_to_sample``), uniformly over that module's agent steps (by
  priority with ``beta`` in a module created with ``alpha``), as
  ``BufferGroup.sample_transitions`` draws them: n-step returns within the agent's own
  episode, ``discounts`` for the bootstrap, ``terminated`` / ``truncated``.
- ``replay_mode="synchronized"``: ``n`` environment steps, uniformly over the stored
  ones; each agent that acted at a drawn step gives its transition from there. Rows of
  different modules with the same ``env_row`` are one joint step.

What differs from RLlib, on purpose: an episode added in chunks is stored chunk by chunk
(each chunk its own stored episode, the earlier ones ending truncated), so an n-step
return stops at a chunk's end and bootstraps there (``discounts`` says how far it got)
rather than being refused; transitions near an episode's end are drawn with the steps
they have rather than never. Episodes are given as dicts (see ``add``), not RLlib
objects; the drop-in over RLlib's classes is ``replaystore.compat.rllib``'s.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np

from ._native import BufferGroup

__all__ = ["MultiAgentEpisodeBuffer"]

ENV = "__env_steps__"
AGENTS = "__agents__"
NONE = np.iinfo(np.uint64).max


def _fields(schema: Mapping[str, Any]) -> Dict[str, Any]:
    reserved = {"env_t", "agent"} & set(schema)
    if reserved:
        raise ValueError(f"field names {sorted(reserved)} are the buffer's own")
    return {**schema, "env_t": "int64", "agent": "uint32"}


class MultiAgentEpisodeBuffer:
    """Multi-agent episodes in the folder ``path``, each agent's steps in its module's
    member. ``schema`` is a module's fields (observation fields, the ``action``, a
    scalar ``reward`` and any others), or a dict ``{module_id: schema}`` for modules
    whose fields differ; ``capacity`` is rows per module (a step's row, plus one per
    episode chunk for its first observation). ``obs`` names the observation fields.
    ``max_agents`` bounds the agents a buffer ever sees (the width of an environment
    step's row); ``env_capacity`` (default ``2 * capacity``) the environment steps
    kept for synchronized draws. ``alpha`` makes every module prioritized. With
    ``schema=None`` the buffer in ``path`` is opened.

    >>> import tempfile, numpy as np
    >>> buf = MultiAgentEpisodeBuffer(tempfile.mkdtemp() + "/ma",
    ...     {"obs": ("float32", (2,)), "action": "int64", "reward": "float32"}, 1000)
    >>> f32 = lambda *x: np.array(x, np.float32)
    >>> buf.add({"id": 1, "agents": {
    ...     "a": {"obs": np.zeros((3, 2), np.float32), "action": [0, 1],
    ...           "reward": f32(0, 1), "env_t": [0, 1, 2], "terminated": True},
    ...     "b": {"obs": np.ones((2, 2), np.float32), "action": [1], "reward": f32(0.5),
    ...           "env_t": [1, 2], "module": "other", "terminated": True}}})
    >>> sorted(buf.sample(4))
    ['default_policy', 'other']
    >>> joint = buf.sample(8, replay_mode="synchronized")
    >>> buf.close()
    """

    DEFAULT_MODULE = "default_policy"

    def __init__(
        self,
        path: str,
        schema: Optional[Mapping[str, Any]] = None,
        capacity: Optional[int] = None,
        *,
        obs: Union[str, Sequence[str]] = "obs",
        max_agents: int = 64,
        env_capacity: Optional[int] = None,
        alpha: Optional[float] = None,
        seed: Optional[int] = None,
    ) -> None:
        self.obs: List[str] = [obs] if isinstance(obs, str) else list(obs)
        if schema is None:
            self._group = BufferGroup.open(path)
            if ENV not in self._group.members:
                self._group.close()
                raise ValueError(f"{path}: not a multi-agent episode buffer (no {ENV})")
        else:
            if capacity is None:
                raise ValueError("a new buffer needs a capacity")
            options: Dict[str, Any] = {"episodic": True, "seed": seed}
            if alpha is not None:
                options["alpha"] = alpha
            per_module = all(isinstance(v, Mapping) for v in schema.values())
            if per_module:
                # Every module now: a reopened buffer creates none it was not given.
                self._group = BufferGroup.create(path)
            else:
                # The template, kept in the group's file, creates each module on first add.
                self._group = BufferGroup.create(path, _fields(schema), capacity, **options)
            width = int(max_agents)
            self._group.add_member(
                ENV, {"env_t": "int64", "steps": ("uint64", (width,))},
                int(env_capacity or 2 * capacity), seed=seed)
            # A chunk row (1 KiB) or more per agent added, each add its own: room for all
            # `width` of them, so none is refused (disk is taken only as names arrive).
            self._group.add_member(AGENTS, {"agent": "str", "module": "str"}, width,
                                   heap_bytes=max(width * 4096, 1 << 20))
            if per_module:
                for m, fields in schema.items():
                    self._check_name(m)
                    self._group.add_member(m, _fields(fields), capacity, **options)
        self._slots: Dict[str, int] = {}
        self._modules_of: List[str] = []
        self._load_slots()

    # ---- agents and modules ----

    def _load_slots(self) -> None:
        n = self._group.member_len(AGENTS)
        if n:
            got = self._group.sample(n, AGENTS, replace=False)  # every row, in any order
            order = np.argsort(got["indices"])
            self._slots = {got["agent"][i]: k for k, i in enumerate(order)}
            self._modules_of = [got["module"][i] for i in order]
        self.max_agents = self._group.stats()[AGENTS]["capacity"]

    @staticmethod
    def _check_name(module: str) -> None:
        if module in (ENV, AGENTS):
            raise ValueError(f"{module!r} is a name the buffer keeps for itself")

    def _slot(self, agent: str, module: str) -> int:
        k = self._slots.get(agent)
        if k is None:
            self._group.add(AGENTS, agent=agent, module=module)
            k = self._slots[agent] = len(self._modules_of)
            self._modules_of.append(module)
        return k

    def _module(self, module: str) -> None:
        self._check_name(module)
        if module not in self._group.members:
            # Created with the template, or refused (modules given one by one).
            try:
                self._group.add_member(module)
            except (KeyError, ValueError) as e:
                raise ValueError(
                    f"module {module!r} is not one of {self.get_module_ids()}") from e

    # ---- adding ----

    def add(self, episodes: Union[Mapping[str, Any], Iterable[Mapping[str, Any]]]) -> None:
        """Adds multi-agent episodes (or chunks of them), each a dict ``{"id": ...,
        "agents": {agent_id: steps}}``. An agent's ``steps`` hold its observation
        fields with one row more than its steps (its first observation, then what each
        action led to), ``action``, ``reward`` and any other step field with a row per
        action, ``env_t``: the environment step of each observation (increasing), and
        optionally ``module`` (default ``"default_policy"``), ``terminated`` and
        ``truncated``. An agent with no action in a chunk is skipped."""
        if isinstance(episodes, Mapping):
            episodes = [episodes]
        for episode in episodes:
            self._add_one(episode)

    def _add_one(self, episode: Mapping[str, Any]) -> None:
        # Every agent is checked before any is stored; a field the engine refuses (a
        # dtype, a shape) leaves the agents before it stored, and the step rows of
        # this episode out of synchronized draws.
        agents = []
        for agent, steps in episode["agents"].items():
            agent = str(agent)
            module = str(steps.get("module", self.DEFAULT_MODULE))
            self._check_name(module)
            env_t = np.asarray(steps["env_t"], np.int64)
            n_obs = len(env_t)
            if n_obs < 2:
                continue
            if np.any(np.diff(env_t) <= 0):
                raise ValueError(f"agent {agent!r}: env_t {env_t.tolist()} does not increase")
            known = self._slots.get(agent)
            if known is not None and self._modules_of[known] != module:
                raise ValueError(f"agent {agent!r} maps to module "
                                 f"{self._modules_of[known]!r}, not {module!r}")
            batch = {k: np.asarray(v) for k, v in steps.items()
                     if k not in ("module", "terminated", "truncated", "env_t")}
            for name in self.obs:
                if len(batch.get(name, ())) != n_obs:
                    raise ValueError(
                        f"agent {agent!r}: observation field {name!r} needs {n_obs} rows "
                        f"(one per env_t)")
            batch["env_t"] = env_t
            # A module the buffer does not have is refused here (or created empty,
            # from the template), before any agent is stored.
            self._module(module)
            agents.append((agent, module, env_t, batch, steps))
        new_agents = {a for a, *_ in agents if a not in self._slots}
        if len(self._slots) + len(new_agents) > self.max_agents:
            raise ValueError(f"more than max_agents={self.max_agents} agents")
        joint: Dict[int, np.ndarray] = {}
        for agent, module, env_t, batch, steps in agents:
            slot = self._slot(agent, module)
            batch["agent"] = np.full(len(env_t), slot, np.uint32)
            e = self._group.add_episode(
                module, batch, terminated=bool(steps.get("terminated", False)),
                truncated=bool(steps.get("truncated", False)))
            # Action i, taken at observation i, ends at step row start + i + 1.
            first_step = e["start"] + 1
            for i, t in enumerate(env_t[:-1].tolist()):
                row = joint.get(t)
                if row is None:
                    row = joint[t] = np.full(self.max_agents, NONE, np.uint64)
                row[slot] = first_step + i
        if joint:
            ts = sorted(joint)
            self._group.add_batch(ENV, {"env_t": np.array(ts, np.int64),
                                        "steps": np.stack([joint[t] for t in ts])})

    # ---- sampling ----

    def sample(
        self,
        num_items: Optional[int] = None,
        *,
        batch_size_B: Optional[int] = None,
        n_step: int = 1,
        gamma: float = 0.99,
        replay_mode: str = "independent",
        modules_to_sample: Optional[Sequence[str]] = None,
        beta: Optional[float] = None,
    ) -> Dict[str, Dict[str, Any]]:
        """``{module_id: batch}`` of transitions: ``num_items`` from each module
        (``"independent"``), or those of ``num_items`` environment steps
        (``"synchronized"``, each row with its ``env_row``). Each batch has the
        observation fields and ``next_<obs>``, the step fields, ``returns`` (n-step,
        discounted by ``gamma``), ``discounts``, ``terminated``, ``truncated``,
        ``env_t`` / ``next_env_t``, ``agent`` (slot; ``agent_ids`` names them) and
        ``indices``."""
        if num_items is not None and batch_size_B is not None:
            raise ValueError("give num_items or batch_size_B, not both")
        n = num_items if num_items is not None else (batch_size_B or 16)
        modules = list(modules_to_sample) if modules_to_sample is not None else self.get_module_ids()
        obs = self.obs + ["env_t", "agent"]
        if replay_mode == "independent":
            return {m: self._group.sample_transitions(n, m, obs, nstep=n_step, gamma=gamma,
                                                      beta=beta)
                    for m in modules if self._group.member_len(m)}
        if replay_mode not in ("synchronized", "lockstep"):
            raise ValueError(f"replay_mode {replay_mode!r}: independent or synchronized")
        if beta is not None:
            raise ValueError("synchronized draws are uniform over environment steps")
        return self._sample_synchronized(n, modules, obs, n_step, gamma)

    def _sample_synchronized(self, n, modules, obs, n_step, gamma):
        stats = self._group.stats()
        if not stats[ENV]["len"]:
            raise ValueError("the buffer holds no environment step")
        heads = {m: stats[m]["head"] for m in modules if m in stats}
        picked: Dict[str, List[tuple]] = {m: [] for m in heads}
        got = 0
        for _ in range(64):
            rows = self._group.sample(n - got, ENV)
            for r, (env_row, steps) in enumerate(zip(rows["indices"], rows["steps"])):
                live = []
                for slot in np.flatnonzero(steps != NONE):
                    m = self._modules_of[slot]
                    # The step and the observation row before it must be live.
                    if m in heads and steps[slot] > heads[m]:
                        live.append((m, int(steps[slot]), int(env_row)))
                if live:
                    for m, j, e in live:
                        picked[m].append((j, e))
                    got += 1
            if got == n:
                break
        else:
            raise ValueError(
                f"found {got} of {n} environment steps with a stored transition in 64 tries")
        out = {}
        for m, rows in picked.items():
            if not rows:
                continue
            at = np.array([j for j, _ in rows], np.uint64)
            b = self._group.sample_transitions(len(at), m, obs, nstep=n_step, gamma=gamma,
                                               at=at)
            b["env_row"] = np.array([e for _, e in rows], np.uint64)
            out[m] = b
        return out

    def update_priorities(self, module_id: str, indices: Any, priorities: Any) -> Dict[str, int]:
        """Sets the priorities of module ``module_id``'s transitions at ``indices`` (a
        batch's ``indices``; RLlib's ``update_priorities`` per module). Returns
        ``{"applied", "stale"}``."""
        return self._group.update_priorities(module_id, indices, priorities)

    # ---- what it holds ----

    def get_module_ids(self) -> List[str]:
        return [m for m in self._group.members if m not in (ENV, AGENTS)]

    @property
    def agent_ids(self) -> List[str]:
        """Agent ids by slot (a batch's ``agent`` column indexes this)."""
        return sorted(self._slots, key=self._slots.get)

    def module_of(self, agent: str) -> str:
        return self._modules_of[self._slots[agent]]

    def get_num_timesteps(self, module_id: Optional[str] = None) -> int:
        """Environment steps stored (with a module: that module's agent steps and first
        observations, its rows)."""
        if module_id is None:
            return self._group.member_len(ENV)
        return self._group.member_len(module_id)

    def __len__(self) -> int:
        return self.get_num_timesteps()

    # ---- checkpoints ----

    def get_state(self) -> Dict[str, Any]:
        """Every member at once, in milliseconds at any size (``set_state`` restores)."""
        return self._group.get_state()

    def set_state(self, state: Mapping[str, Any]) -> None:
        self._group.set_state(state)
        self._slots, self._modules_of = {}, []
        self._load_slots()

    def flush(self) -> None:
        self._group.flush()

    def close(self) -> None:
        self._group.close()

    def __enter__(self) -> "MultiAgentEpisodeBuffer":
        return self

    def __exit__(self, *args: Any) -> bool:
        self.close()
        return False
