"""An aiosmtpd handler for bizrq's email tests: every accepted message is
written to DIR as one JSON file (envelope, headers, text and HTML parts).

    python3 -m aiosmtpd -n -l 127.0.0.1:PORT -c smtp_sink.Sink DIR

Hold mode, for tests that kill a client mid-send: while a file named
`hold` exists in DIR, each RCPT first writes a marker file `held` in DIR,
then waits until `hold` is removed before answering. A client killed while
held never completes its transaction, so nothing is recorded for it; later
connections are served (and recorded) as usual.
"""

import asyncio
import email
import email.policy
import json
import os
import uuid


class Sink:
    def __init__(self, directory):
        self.directory = directory

    @classmethod
    def from_cli(cls, parser, *args):
        if len(args) != 1:
            parser.error("smtp_sink.Sink takes one argument: the directory")
        return cls(args[0])

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        hold = os.path.join(self.directory, "hold")
        if os.path.exists(hold):
            with open(os.path.join(self.directory, "held"), "w") as f:
                f.write(address)
            while os.path.exists(hold):
                await asyncio.sleep(0.05)
        # What aiosmtpd does without this hook.
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        text = msg.get_body(("plain",))
        html = msg.get_body(("html",))
        record = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "message_id": msg["Message-ID"],
            "from": msg["From"],
            "to": msg["To"],
            "subject": msg["Subject"],
            "content_type": msg.get_content_type(),
            "text": text.get_content() if text is not None else None,
            "html": html.get_content() if html is not None else None,
        }
        name = uuid.uuid4().hex
        tmp = os.path.join(self.directory, name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(record, f)
        # Renamed into place before the 250: a file is a message the server accepted.
        os.rename(tmp, os.path.join(self.directory, name + ".json"))
        return "250 Message accepted for delivery"
