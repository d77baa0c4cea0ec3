-- Every column of the tables the product reads at its default and at NULL (or ''), loaded and saved, then
-- each table read in memory, runtime and disk (issue 33): where ProxySQL shows NULL as '' at runtime, or '' as NULL.
-- One statement a line; lab/conformance.py replays it on the double and on real 2.7.1 and 2.5.5.
INSERT INTO mysql_users (username) VALUES ('u_nopass')
INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('app','pw',100)
INSERT INTO mysql_users (username,password,default_schema,comment,attributes) VALUES ('app_empty','pw','','','')
INSERT INTO mysql_users (username,password,default_schema,active) VALUES ('inactive',NULL,NULL,0)
INSERT INTO mysql_query_rules (rule_id) VALUES (1)
INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,apply,re_modifiers) VALUES (2,1,'^SELECT',101,1,NULL)
INSERT INTO mysql_query_rules (rule_id,active,username,schemaname,client_addr,proxy_addr,digest,match_digest,match_pattern,replace_pattern,error_msg,OK_msg,comment,re_modifiers) VALUES (3,1,'','','','','','','x','','','','','')
INSERT INTO mysql_query_rules (rule_id,active,re_modifiers,comment,attributes) VALUES (4,1,'caseless,global',NULL,'')
INSERT INTO mysql_query_rules (rule_id,active,proxy_port,flagOUT,destination_hostgroup,cache_ttl,cache_empty_result,cache_timeout,reconnect,timeout,retries,delay,next_query_flagIN,mirror_flagOUT,mirror_hostgroup,sticky_conn,multiplex,gtid_from_hostgroup,log) VALUES (5,1,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0)
INSERT INTO mysql_servers (hostname) VALUES ('10.9.9.8')
INSERT INTO mysql_servers (hostgroup_id,hostname,port,comment) VALUES (1,'10.9.9.7',3307,'')
INSERT INTO mysql_galera_hostgroups (writer_hostgroup,backup_writer_hostgroup,reader_hostgroup,offline_hostgroup,active) VALUES (10,11,12,13,0)
INSERT INTO mysql_galera_hostgroups (writer_hostgroup,backup_writer_hostgroup,reader_hostgroup,offline_hostgroup,active,comment) VALUES (14,15,16,17,0,'')
INSERT INTO mysql_group_replication_hostgroups (writer_hostgroup,backup_writer_hostgroup,reader_hostgroup,offline_hostgroup,active) VALUES (20,21,22,23,0)
INSERT INTO mysql_replication_hostgroups (writer_hostgroup,reader_hostgroup) VALUES (30,31)
INSERT INTO mysql_aws_aurora_hostgroups (writer_hostgroup,reader_hostgroup,active,domain_name) VALUES (40,41,0,'.x')
INSERT INTO mysql_hostgroup_attributes (hostgroup_id) VALUES (5)
INSERT INTO mysql_query_rules_fast_routing (username,schemaname,destination_hostgroup,comment) VALUES ('a','b',1,'')
INSERT INTO scheduler (id,active,interval_ms,filename) VALUES (1,0,1000,'/bin/true')
INSERT INTO scheduler (id,active,interval_ms,filename,arg1,arg2,arg3,arg4,arg5) VALUES (2,0,1000,'/bin/true','','','','','')
INSERT INTO proxysql_servers (hostname) VALUES ('10.9.9.9')
LOAD MYSQL USERS TO RUNTIME
LOAD MYSQL QUERY RULES TO RUNTIME
LOAD MYSQL SERVERS TO RUNTIME
LOAD SCHEDULER TO RUNTIME
LOAD PROXYSQL SERVERS TO RUNTIME
SAVE MYSQL USERS TO DISK
SAVE MYSQL QUERY RULES TO DISK
SAVE MYSQL SERVERS TO DISK
SAVE SCHEDULER TO DISK
SAVE PROXYSQL SERVERS TO DISK
SELECT * FROM mysql_users ORDER BY username, backend
SELECT * FROM runtime_mysql_users ORDER BY username, backend
SELECT * FROM disk.mysql_users ORDER BY username, backend
SELECT * FROM mysql_query_rules ORDER BY rule_id
SELECT * FROM runtime_mysql_query_rules ORDER BY rule_id
SELECT * FROM disk.mysql_query_rules ORDER BY rule_id
SELECT * FROM mysql_servers ORDER BY hostgroup_id, hostname, port
SELECT * FROM runtime_mysql_servers ORDER BY hostgroup_id, hostname, port
SELECT * FROM disk.mysql_servers ORDER BY hostgroup_id, hostname, port
SELECT * FROM mysql_galera_hostgroups ORDER BY writer_hostgroup
SELECT * FROM runtime_mysql_galera_hostgroups ORDER BY writer_hostgroup
SELECT * FROM disk.mysql_galera_hostgroups ORDER BY writer_hostgroup
SELECT * FROM mysql_group_replication_hostgroups ORDER BY writer_hostgroup
SELECT * FROM runtime_mysql_group_replication_hostgroups ORDER BY writer_hostgroup
SELECT * FROM disk.mysql_group_replication_hostgroups ORDER BY writer_hostgroup
SELECT * FROM mysql_replication_hostgroups ORDER BY writer_hostgroup
SELECT * FROM runtime_mysql_replication_hostgroups ORDER BY writer_hostgroup
SELECT * FROM disk.mysql_replication_hostgroups ORDER BY writer_hostgroup
SELECT * FROM mysql_aws_aurora_hostgroups ORDER BY writer_hostgroup
SELECT * FROM runtime_mysql_aws_aurora_hostgroups ORDER BY writer_hostgroup
SELECT * FROM disk.mysql_aws_aurora_hostgroups ORDER BY writer_hostgroup
SELECT * FROM mysql_hostgroup_attributes ORDER BY hostgroup_id
SELECT * FROM runtime_mysql_hostgroup_attributes ORDER BY hostgroup_id
SELECT * FROM disk.mysql_hostgroup_attributes ORDER BY hostgroup_id
SELECT * FROM mysql_query_rules_fast_routing ORDER BY username, schemaname, flagIN
SELECT * FROM runtime_mysql_query_rules_fast_routing ORDER BY username, schemaname, flagIN
SELECT * FROM disk.mysql_query_rules_fast_routing ORDER BY username, schemaname, flagIN
SELECT * FROM scheduler ORDER BY id
SELECT * FROM runtime_scheduler ORDER BY id
SELECT * FROM disk.scheduler ORDER BY id
SELECT * FROM proxysql_servers ORDER BY hostname, port
SELECT * FROM runtime_proxysql_servers ORDER BY hostname, port
SELECT * FROM disk.proxysql_servers ORDER BY hostname, port
SAVE MYSQL USERS FROM RUNTIME
SAVE MYSQL QUERY RULES FROM RUNTIME
SELECT * FROM mysql_users ORDER BY username, backend
SELECT * FROM mysql_query_rules ORDER BY rule_id
