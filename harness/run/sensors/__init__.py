"""Sensors: everything that touches the machine or a process while a run happens.

- ``power``: the accelerator's (NVML) or CPU package's (RAPL) power, sampled on a thread;
- ``cpu``: ``/proc`` snapshots around a window (the engine's, the client's and everyone's CPU time);
- ``gpu``: NVML's view of the processes on the GPUs, polled on a thread during a window;
- ``environment``: the collectors of ``environment.json`` (versions, CPU, GPUs, variables);
- ``devices``: which GPUs ``CUDA_VISIBLE_DEVICES`` leaves this process.

They record raw samples only. What the samples mean (energy, J/token, CPU shares, neighbours) is
computed from the stored samples by ``harness.core.probes``, which touch nothing.
"""
