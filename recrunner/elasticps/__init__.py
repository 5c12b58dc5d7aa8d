"""Elastic parameter-server jobs (`mode=ps mode.elastic.max_trainers=N`): trainers come and go
while the servers keep the parameters.

ElasticDL's design on Paddle's PS (docs/distributed.md, "Elastic parameter-server jobs"):
- the **master** (PS client 0, `master.py`) splits each epoch's data into tasks, evaluates,
  checkpoints and exports; it trains nothing;
- **trainers** (`trainer.py`) take tasks from a queue in etcd (`tasks.py`) under a lease, train
  each through Paddle's data feed, and mark it done; a trainer that dies loses its lease, and
  its task goes back in the queue;
- the **supervisor** (`launch.py`) runs the job on this machine and changes the trainer count
  when `recrun scale` asks (`scale.py`); on a cluster the pod count does.

Paddle 3.0's async servers serve any client that connects (measured: docs/distributed.md); what
made a PS job fixed-size was gloo's barriers, which these processes run without.
"""
