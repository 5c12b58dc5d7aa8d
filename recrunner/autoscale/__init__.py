"""`recrun autoscale` and `recrun top`: elastic jobs resized against each other and the
capacity, as Paddle EDL's autoscaler does.

- `policy.py` decides (pure: jobs and free capacity in, trainer counts out);
- `local.py` and `kube.py` observe and act: this machine's elastic PS jobs in a folder of run
  directories, sharing `autoscale.capacity` trainer slots; or a namespace's elastic
  PaddleJobs, against the nodes' allocatable CPU and memory minus the pods' requests;
- `controller.py` runs the loop; `top.py` is the monitor.
"""
