import json, time
from apps.monitoring import pollers, live
from apps.fleet.models import Server

def test_dump(adopted_lab, live_redis):
    cluster, doubles = adopted_lab
    nodes = list(cluster.proxysql_nodes.select_related("cluster"))
    servers = list(Server.objects.select_related("cluster"))
    t=time.time()
    print(pollers.proxysql_round(nodes), time.time()-t)
    time.sleep(0.5)
    print(pollers.proxysql_round(nodes))
    print(pollers.backend_round(servers))
    d = live.read_many("proxysql", [n.pk for n in nodes])
    print(json.dumps(d[nodes[0].pk], indent=1)[:6000])
    print(len(json.dumps(d[nodes[0].pk])))
    b = live.read_many("backend", [s.pk for s in servers])
    print(json.dumps(b[servers[0].pk], indent=1))
