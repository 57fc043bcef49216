"""The benchmarks of ubiquityfs (`scripts/bench`, which runs `python3 -m ubiquitybench`), and the helpers they
share with the integration tests (`harness`).

  harness       running commands, waiting, a remote stub and a mount: also Tests/mounts/conftest.py's
  common        the bench's container, the cleanup of what it started, the baselines, measuring helpers
  report        rows against baselines, alternation of contenders, the table and the plot
  suite         the workloads of scripts/bench (w1 ... w8, wL)
  propagation   many changes between two devices, old binary against new (python3 -m ubiquitybench.propagation)
  small_files   small files and metadata, old binary against new (python3 -m ubiquitybench.small_files)
  million       a container of a million items (python3 -m ubiquitybench.million)
Stdlib only; matplotlib for the plot.
"""
