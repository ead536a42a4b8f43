"""serve.status(): applications and deployments, with Ray's status names."""
from servefleet import serve
from servefleet.serve.schema import ApplicationStatus, DeploymentStatus


@serve.deployment(num_replicas=2)
class Model:
    def __call__(self) -> str:
        return "ok"


serve.run(Model.bind(), name="model", route_prefix="/model")
status = serve.status()
app = status.applications["model"]
assert app.status == ApplicationStatus.RUNNING, app.status
assert app.deployments["Model"].status == DeploymentStatus.HEALTHY
assert app.deployments["Model"].replica_states.get("RUNNING") == 2, app.deployments
serve.delete("model")
assert "model" not in serve.status().applications
serve.shutdown()
print("OK")
