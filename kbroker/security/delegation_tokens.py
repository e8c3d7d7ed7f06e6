"""Delegation tokens (placeholder until the token APIs land): SCRAM token lookup."""


def token_credential(security, image, token_id: str, mechanism: str):
    return None
