import asyncio, os, sys
import quartermaster as qm

async def main(command):
    async with await qm.connect(os.environ["QM_NATS_URL"], nkey_file=os.environ["QM_NKEY"]) as client:
        job = await client.submit(job_name="fine-tune", job_queue="training", quota_share_name="QS1",
                                  instance_type="ml.g5.xlarge", command=command)
        async for event in client.watch(job.job_id, since=job.submitted_at):
            print(event.describe(), flush=True)

asyncio.run(main(sys.argv[1:]))
