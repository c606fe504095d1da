"""The cluster recipe on verl: PPO with a critic for multi-turn agentic RL (the paper's stage 4).

* :mod:`.episode`: the token-in/token-out driver of the agent's episode engine, independent of
  verl (tested against a local OpenAI-compatible server and in the conformance test): generated
  tokens get mask 1 and their log-probs, tool output mask 0; the reward is the engine's.
* :mod:`.agent_loop`: that driver as a verl ``AgentLoopBase`` (``configs/verl/agent_loops.yaml``).
* :mod:`.reward`: a verl ``custom_reward_function`` (``compute_score``) for single-turn rows.
* :mod:`.dataset`: tasks -> the parquet verl's ``RLHFDataset`` reads.
* :mod:`.schema`: our configs composed by Hydra against the installed verl's config and checked,
  resolved both as the submitting shell and as a Ray worker sees them.
* :mod:`.launch`: ``main_ppo`` with the workers' variables in ``ray_kwargs.ray_init.runtime_env.env_vars``.

verl, Ray and vLLM are imported only by :mod:`.agent_loop`, and only when verl loads it; the config
checks need Hydra and verl's packaged YAML files, not verl's dependencies.
"""
