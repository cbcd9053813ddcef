"""The real-GPU validation kit (``bench/gpu/run.sh``): placement on real GPUs, measured.

Modules: :mod:`gpukit.workload` (the tasks), :mod:`gpukit.train` (one task's process: PyTorch
on a real GPU, carma's synthetic workload on simulated ones), :mod:`gpukit.driver` (light mode:
placer + monitor + task processes, no Airflow), :mod:`gpukit.airflow_mode` (the same DAG through
Airflow and CarmaExecutor), :mod:`gpukit.report` (figures, JSON, timeline) and
:mod:`gpukit.cli` (what ``run.sh`` calls).
"""
