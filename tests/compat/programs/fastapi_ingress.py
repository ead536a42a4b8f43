"""A FastAPI app on a deployment class: path parameters, a body, a WebSocket."""
import asyncio

import requests
import websockets
from fastapi import FastAPI, WebSocket
from pydantic import BaseModel

from servefleet import serve

api = FastAPI()


class Order(BaseModel):
    item: str
    quantity: int


@serve.deployment
@serve.ingress(api)
class Shop:
    def __init__(self, prices: dict):
        self.prices = prices

    @api.get("/price/{item}")
    def price(self, item: str) -> dict:
        return {"item": item, "price": self.prices[item]}

    @api.post("/order")
    def order(self, order: Order) -> dict:
        return {"total": self.prices[order.item] * order.quantity}

    @api.websocket("/echo")
    async def echo(self, ws: WebSocket):
        await ws.accept()
        text = await ws.receive_text()
        await ws.send_text(text.upper())
        await ws.close()


serve.run(Shop.bind({"apple": 3}), route_prefix="/shop")
assert requests.get("http://127.0.0.1:8000/shop/price/apple").json() == {
    "item": "apple", "price": 3}
assert requests.post("http://127.0.0.1:8000/shop/order",
                     json={"item": "apple", "quantity": 4}).json() == {"total": 12}


async def talk():
    async with websockets.connect("ws://127.0.0.1:8000/shop/echo") as ws:
        await ws.send("hi")
        assert await ws.recv() == "HI"


asyncio.run(talk())
serve.shutdown()
print("OK")
