#!/usr/bin/python3
"""What answering in the Anthropic Messages and OpenAI Responses protocols costs: the latency of
a library hit through `dynrt serve` on each route, whole and streamed, against chat.

    bench/protocols_latency.py [BUILD_DIR] [CALLS]

Starts dynrt-sim-engine and `dynrt serve tests/e2e/data/protocols` on loopback, sends CALLS
tagged router calls per cell on one kept-alive connection (the first 100 are warm-up), and
prints p50 and p99 in microseconds. The three bodies translate to one chat request, so after
the first call every cell is served from the library: the difference is the translation.
"""
import http.client
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
from checks import launch, stop  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
calls = int(sys.argv[2]) if len(sys.argv) > 2 else 600
e,ep,_=launch([os.path.join(build, 'dynrt-sim-engine'),'--port','0','--time-scale','1000'])
s,p,_=launch([os.path.join(build, 'dynrt'),'serve',os.path.join(HERE, '..', 'tests', 'e2e', 'data', 'protocols'),'--port','0','--engine','qwen3-32b=http://127.0.0.1:%d'%ep], r":(\d+) ")
conn=http.client.HTTPConnection('127.0.0.1',p)
q='is it windy in Faro'
bodies={
 '/v1/chat/completions': {"model":"qwen3-32b","temperature":0,"max_tokens":512,"messages":[{"role":"system","content":"S"},{"role":"user","content":q}]},
 '/v1/messages': {"model":"qwen3-32b","temperature":0,"max_tokens":512,"system":"S","messages":[{"role":"user","content":q}]},
 '/v1/responses': {"model":"qwen3-32b","temperature":0,"max_output_tokens":512,"instructions":"S","input":q},
}
wf={'/v1/chat/completions':None,'/v1/messages':'triage-messages','/v1/responses':'triage-responses'}
res={}
for path,body in bodies.items():
  for stream in (False, True):
    b=dict(body); 
    if stream: b['stream']=True
    data=json.dumps(b)
    lat=[]; served=set()
    for i in range(calls):
      h={"Content-Type":"application/json","X-DynRT-Workflow":wf[path] or "triage-messages","X-DynRT-Workflow-Id":"r%d"%i,"X-DynRT-Stage":"router"}
      t=time.perf_counter(); conn.request('POST',path,body=data,headers=h); r=conn.getresponse(); r.read(); lat.append(time.perf_counter()-t)
      served.add(r.getheader('X-DynRT-Served'))
    lat=sorted(lat[100:])
    res[(path,stream)]=(statistics.median(lat)*1e6, lat[int(len(lat)*0.99)]*1e6, served)
for k,v in res.items(): print(k, "p50 %.0f us p99 %.0f us"%(v[0],v[1]), v[2])
stop(s); e.terminate()
