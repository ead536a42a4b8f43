"""Plain synchronous driver code: .result() and iterating a stream."""
from servefleet import serve


@serve.deployment
class Counter:
    def __init__(self):
        self.count = 0

    def increment(self, by: int) -> int:
        self.count += by
        return self.count

    def count_to(self, n: int):
        for i in range(n):
            yield i


handle = serve.run(Counter.bind())
assert handle.increment.remote(5).result() == 5
assert handle.increment.remote(2).result(timeout_s=30) == 7
stream = handle.options(stream=True).count_to.remote(4)
assert [i for i in stream] == [0, 1, 2, 3]
serve.shutdown()
print("OK")
