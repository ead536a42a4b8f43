"""_local_testing_mode: the application runs in this process, for unit tests."""
from servefleet import serve
from servefleet.serve.handle import DeploymentHandle


@serve.deployment
class Tokenizer:
    def split(self, text: str) -> list:
        return text.split()


@serve.deployment
class Counter:
    def __init__(self, tokenizer: DeploymentHandle):
        self.tokenizer = tokenizer

    async def __call__(self, text: str) -> int:
        return len(await self.tokenizer.split.remote(text))


handle = serve.run(Counter.bind(Tokenizer.bind()), _local_testing_mode=True)
assert handle.remote("one two three").result() == 3
print("OK")
