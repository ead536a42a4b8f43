"""ServeApplications: applications declared as Kubernetes objects
(serveapplications.servefleet.io, `servefleet controller --kube-applications`).

The leader watches the ServeApplications of its namespace and applies them
through the same path as DeployApplications, then writes each object's
status back:

- `objects.py`: one object read as an application spec, with the config
  file's validator (pure);
- `ownership.py`: which objects own which applications, and what a pass
  does about it (pure); `owners.py`: the ownership records in the store;
- `status.py`: an object's status from the application's (pure);
- `cache.py`: the objects, listed and watched (the loop's work);
- `reconciler.py`: all of it as a reconciler on the controller's loop;
- `client.py`: the API client the controller's flags describe.
"""
