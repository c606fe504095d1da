"""Training: the CUDA Agent paper's staged recipe on TRL (one node) and verl (cluster).

Stages (``cuda-agent train <stage>``; one module each, registered in :data:`STAGES`):

1. ``single-turn``: RL warm-up, prompt = task, completion = whole solution (TRL GRPOTrainer);
2. ``rft``: rejection fine-tuning on cleaned positive-reward agent trajectories (TRL SFTTrainer,
   loss on assistant turns only);
3. ``value``: critic pretraining on trajectory states -> outcome reward
   (AutoModelForTokenClassification, num_labels=1: the class verl's critic loads);
4. ``agentic``: multi-turn agentic RL. On one node: TRL GRPOTrainer with our tools as its
   environment (no critic). The paper's PPO with the pretrained critic (GAE gamma=1,
   lambda=0.95, clip 0.2/0.28) runs on verl: :mod:`cuda_agent.train.cluster`, configs/verl/.

Around them: the evaluation service (:mod:`.service`, :mod:`.client`) that keeps kernel timing
off training GPUs; data plumbing (:mod:`.data`, :mod:`.trajectories`, :mod:`.cleaning`); the RL
math (:mod:`.rlmath`); run logs (:mod:`.metrics`); settings through TRL's parser (:mod:`.config`) and
presets (:mod:`.presets`); the four stages chained and resumable (:mod:`.recipe`). Heavy libraries
(transformers, TRL, datasets, verl) are imported inside the functions that need them.
"""

STAGES: dict[str, str] = {
    "single-turn": "cuda_agent.train.single_turn:SingleTurnStage",
    "rft": "cuda_agent.train.rft:RFTStage",
    "value": "cuda_agent.train.value:ValueStage",
    "agentic": "cuda_agent.train.agentic:AgenticStage",
}
