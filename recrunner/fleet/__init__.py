"""Fleet jobs: mode=collective (data parallel) and mode=ps (parameter server).

One entry point serves every process: `recrun train` with no role in the environment is the
launcher (it starts the job through `paddle.distributed.launch` and supervises it); with the
role variables that `paddle.distributed.launch` or the Paddle Operator sets, the same command
is one trainer or server of the job.
"""
