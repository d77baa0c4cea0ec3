"""SHOW REPLICA STATUS read the same from MariaDB and from MySQL 8.0.22 and later, which renamed its columns: every
reader (the channel, the pollers, adoption, the switchover's lag guard) uses MariaDB's names."""

from apps.clients.backend import replica_status_names


def test_mysql_8_names_read_as_mariadbs_and_mariadbs_stay():
    mysql8 = {
        "Replica_IO_State": "Waiting for source to send event",
        "Source_Host": "10.0.0.1",
        "Source_Port": 3306,
        "Replica_IO_Running": "Yes",
        "Replica_SQL_Running": "Yes",
        "Seconds_Behind_Source": 3,
        "Read_Source_Log_Pos": 157,
        "Replicate_Do_DB": "",
        "Last_IO_Error": "",
    }
    assert replica_status_names(mysql8) == {
        "Slave_IO_State": "Waiting for source to send event",
        "Master_Host": "10.0.0.1",
        "Master_Port": 3306,
        "Slave_IO_Running": "Yes",
        "Slave_SQL_Running": "Yes",
        "Seconds_Behind_Master": 3,
        "Read_Master_Log_Pos": 157,
        "Replicate_Do_DB": "",
        "Last_IO_Error": "",
    }
    mariadb = {
        "Master_Host": "10.0.0.1",
        "Slave_IO_Running": "Yes",
        "Seconds_Behind_Master": None,
        "Using_Gtid": "Slave_Pos",
    }
    assert replica_status_names(mariadb) == mariadb
