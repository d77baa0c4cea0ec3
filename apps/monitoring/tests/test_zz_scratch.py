import json, time
from django.urls import reverse
from apps.monitoring import pollers, live
from apps.fleet.models import Server

def test_dump(adopted_lab, live_redis, viewer_client):
    cluster, doubles = adopted_lab
    nodes = list(cluster.proxysql_nodes.select_related("cluster"))
    servers = list(Server.objects.select_related("cluster"))
    pollers.proxysql_round(nodes); pollers.backend_round(servers)
    time.sleep(0.5)
    pollers.proxysql_round(nodes); pollers.backend_round(servers)
    for url in ["/", reverse("monitoring:overview_live"), cluster.get_absolute_url(), nodes[0].get_absolute_url(),
                reverse("monitoring:proxysql_pool", args=[nodes[0].pk]), servers[0].get_absolute_url(),
                reverse("monitoring:proxysql_chart", args=[nodes[0].pk, "queries"]),
                reverse("monitoring:server_chart", args=[servers[0].pk, "wsrep_state"])]:
        r = viewer_client.get(url)
        body = r.content.decode()
        open("/tmp/scratch/" + url.strip("/").replace("/", "_") + ".html", "w").write(body)
        print(url, r.status_code, len(body))
