"""Distributed training: a gang of 3 pods (1 control, 2 workers) run as one JobSet.

`current.parallel` gives each rank its index and the control pod's address, which is
what torchrun / deepspeed / ray decorators read to form their process group.
"""

from metaflow import FlowSpec, Parameter, current, kubernetes, parallel, retry, step


class DistributedTrainingFlow(FlowSpec):
    nodes = Parameter("nodes", default=3, type=int, help="Pods in the training gang.")

    @step
    def start(self):
        self.next(self.train, num_parallel=self.nodes)

    @kubernetes(image="python:3.11", cpu=2, memory=8192, shared_memory=1024, port=29500)
    @retry(times=1)
    @parallel
    @step
    def train(self):
        self.rank = current.parallel.node_index
        self.world_size = current.parallel.num_nodes
        self.main_ip = current.parallel.main_ip
        print("rank %d of %d, control at %s" % (self.rank, self.world_size, self.main_ip))
        self.next(self.join)

    @step
    def join(self, inputs):
        ranks = sorted(i.rank for i in inputs)
        assert ranks == list(range(self.nodes)), "missing ranks: %s" % ranks
        self.ranks = ranks
        self.next(self.end)

    @step
    def end(self):
        print("all %d ranks arrived" % len(self.ranks))


if __name__ == "__main__":
    DistributedTrainingFlow()
