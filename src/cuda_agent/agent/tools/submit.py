"""`submit`: end the episode. The result is the best verified solution; sources changed since the
last verify are verified once more first (AgentConfig.verify_on_submit)."""

from __future__ import annotations

from . import Tool, ToolResult, obj


class Submit(Tool):
    name = "submit"
    description = ("Finish: end the episode. The best verified solution is the result; if model_new.py or kernels/ "
                   "changed since your last verify, they are verified once more first.")
    parameters = obj({"summary": {"type": "string", "description": "one or two sentences on what you did"}})

    def run(self, args, env) -> ToolResult:
        verify = None
        if env.config.verify_on_submit and env.unverified_changes():
            from .kernel import Verify
            verify = Verify().run({}, env)
        best = env.best_summary()
        text = f"submitted. {best}"
        if verify is not None:
            text = f"verified the last changes first:\n{verify.output}\n{text}"
        return ToolResult(text, submitted=True, verdict=verify.verdict if verify else None,
                          sandbox_s=verify.sandbox_s if verify else 0.0)
