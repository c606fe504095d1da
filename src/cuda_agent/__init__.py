"""cuda-agent: teach LLM agents to write CUDA kernels faster than torch.compile.

Parts (each imports only from the parts listed before it):
  tasks/    the Task record and its loaders
  sandbox/  build, verify, time, profile and guard a candidate -> Verdict (+ reward)
  cli.py    the ``cuda-agent`` command
"""

__version__ = "0.1.0"
