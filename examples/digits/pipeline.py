"""The digits classifier behind an ingress: two deployments, an array between them.

Deployed by examples/digits/config.yaml as the application `digits-pipeline`:

    curl --data-binary @examples/digits/samples/7.png -H 'content-type: image/png' \\
        http://127.0.0.1:8000/digits-pipeline

`DigitsIngress` decodes and normalises the body (a PNG or JSON, as in
classifier.py) into a float32 8x8 numpy array and hands it to the classifier
through a handle; the array travels as an array (pickled, its buffer out of
band), not as JSON. The answer is the classifier's, plus `received`: the
type, dtype and shape the classifier saw. The classifier scales on its own
between 1 and 2 replicas with the requests it holds (queued for a batch or
running).
"""

from __future__ import annotations

from classifier import DigitClassifier
from digit_images import ImageError, image_from_body
from starlette.responses import JSONResponse

from servefleet import DeploymentHandle, deployment


@deployment(max_ongoing_requests=64)
class DigitsIngress:
    def __init__(self, classifier: DeploymentHandle) -> None:
        self.classifier = classifier

    async def __call__(self, request) -> JSONResponse:
        try:
            image = image_from_body(await request.body(), request.headers.get("content-type", ""))
        except ImageError as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        answer = await self.classifier.predict.remote(image)
        return JSONResponse({"digit": answer["digit"], "probabilities": answer["probabilities"],
                             "received": answer["received"]},
                            headers={"x-batch-size": str(answer["batch_size"])})


# A request holds the classifier for a few milliseconds (the batch wait and the
# run), so two held on average is already a busy replica for this model; the
# reports come quicker than the defaults (every 10 s, averaged over 30 s), so a
# few seconds of load show the second replica start.
classifier = DigitClassifier.options(
    name="PipelineClassifier",
    autoscaling_config={"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 2,
                        "metrics_interval_s": 1, "look_back_period_s": 5,
                        "upscale_delay_s": 2, "downscale_delay_s": 30})
app = DigitsIngress.bind(classifier.bind())
